// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The README's lists agree with the tree.
//!
//! * The fuzz targets: the table in `README.md`, the one in `fuzz/README.md`,
//!   the files `fuzz/fuzz_targets/*.rs` and the `[[bin]]`s of
//!   `fuzz/Cargo.toml` name the same targets.
//! * The programs: the README's "Programs" table (name and crate) plus its
//!   list of benchmark and test programs name exactly the workspace's
//!   binaries (`[[bin]]`, `src/main.rs`, `src/bin/*.rs`) and examples.
//! * The layout: every workspace member and `fuzz/` is in the README's
//!   "Layout" block, and everything that block names exists.
//! * Every repository path the README quotes inline (`scripts/demo.sh`,
//!   `docs/switch.md`, ...) exists.
//!
//! Cheap: it reads files, needs no root and no peer, and runs with the
//! unit tests (`cargo test --workspace`). When one fails, its message says
//! what to add or remove where.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root (the parent of the `tests` crate).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives inside the workspace")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The text between backticks in `s`.
fn quoted(s: &str) -> Vec<String> {
    s.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// `s` without the fenced code blocks.
fn prose(md: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The body rows (cells trimmed) of the first Markdown table at or after
/// the first line containing `marker`.
fn table_after(md: &str, marker: &str) -> Vec<Vec<String>> {
    let mut lines = md
        .lines()
        .skip_while(|l| !l.contains(marker))
        .map(str::trim_start)
        .skip_while(|l| !l.starts_with('|'));
    let header = lines.next();
    assert!(header.is_some(), "no table after {marker:?}");
    lines
        .skip(1) // |---|---|
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The first backticked word of each row's first cell.
fn first_column(rows: &[Vec<String>]) -> BTreeSet<String> {
    rows.iter()
        .filter_map(|r| quoted(&r[0]).into_iter().next())
        .collect()
}

/// A manifest's sections in order: the header (`package`, `[bin]`, ...)
/// and its `key = value` pairs, string values unquoted. Enough for the
/// flat manifests of this workspace.
fn manifest(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut sections = vec![(String::new(), Vec::new())];
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            let header = line.strip_prefix('[').and_then(|l| l.strip_suffix(']'));
            sections.push((header.unwrap_or(line).to_owned(), Vec::new()));
        } else if let Some((k, v)) = line.split_once('=') {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            let last = sections.last_mut().expect("starts with one section");
            last.1.push((k.trim().to_owned(), v.to_owned()));
        }
    }
    sections
}

fn value<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The workspace's members, from the root manifest's `members = [...]`.
fn members() -> Vec<String> {
    let text = read("Cargo.toml");
    let at = text
        .find("members")
        .expect("the root manifest lists members");
    let list = &text[at..];
    let list = &list[list.find('[').expect("members = [")..list.find(']').expect("]")];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// `.rs` file stems in `dir` (relative to the root), sorted.
fn rs_stems(dir: &str) -> BTreeSet<String> {
    let Ok(entries) = fs::read_dir(root().join(dir)) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "rs").then(|| p.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect()
}

/// A program the workspace builds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Program {
    name: String,
    /// The member's directory with a trailing `/`, as the README writes it.
    krate: String,
    example: bool,
}

/// Every binary and example of `member`, as cargo finds them: explicit
/// `[[bin]]`/`[[example]]` targets, then `src/main.rs`, `src/bin/*.rs` and
/// `examples/*.rs` unless the manifest turns discovery off.
fn programs_of(member: &str) -> Vec<Program> {
    let sections = manifest(&read(&format!("{member}/Cargo.toml")));
    let package = sections
        .iter()
        .find(|(h, _)| h == "package")
        .map(|(_, kv)| kv.clone())
        .unwrap_or_default();
    let name = value(&package, "name").unwrap_or(member).to_owned();
    let auto = |key: &str| value(&package, key) != Some("false");
    let krate = format!("{member}/");
    let mut out = Vec::new();
    let mut explicit_paths = BTreeSet::new();
    for (kind, example) in [("[bin]", false), ("[example]", true)] {
        for (_, kv) in sections.iter().filter(|(h, _)| h == kind) {
            let n = value(kv, "name").expect("a target has a name").to_owned();
            if let Some(p) = value(kv, "path") {
                explicit_paths.insert(p.to_owned());
            }
            out.push(Program {
                name: n,
                krate: krate.clone(),
                example,
            });
        }
    }
    let known = |out: &[Program], n: &str, example: bool| {
        out.iter().any(|p| p.name == n && p.example == example)
    };
    if auto("autobins") {
        if root().join(member).join("src/main.rs").is_file()
            && !explicit_paths.contains("src/main.rs")
            && !known(&out, &name, false)
        {
            out.push(Program {
                name: name.clone(),
                krate: krate.clone(),
                example: false,
            });
        }
        for stem in rs_stems(&format!("{member}/src/bin")) {
            if !explicit_paths.contains(&format!("src/bin/{stem}.rs")) && !known(&out, &stem, false)
            {
                out.push(Program {
                    name: stem,
                    krate: krate.clone(),
                    example: false,
                });
            }
        }
    }
    if auto("autoexamples") {
        for stem in rs_stems(&format!("{member}/examples")) {
            if !explicit_paths.contains(&format!("examples/{stem}.rs")) && !known(&out, &stem, true)
            {
                out.push(Program {
                    name: stem,
                    krate: krate.clone(),
                    example: true,
                });
            }
        }
    }
    out
}

fn diff(what: &str, listed: &BTreeSet<String>, actual: &BTreeSet<String>) -> Option<String> {
    let missing: Vec<_> = actual.difference(listed).collect();
    let extra: Vec<_> = listed.difference(actual).collect();
    (!missing.is_empty() || !extra.is_empty())
        .then(|| format!("{what}: missing {missing:?}, no such {extra:?}"))
}

#[test]
fn fuzz_targets_are_listed_where_the_readmes_say() {
    let files = rs_stems("fuzz/fuzz_targets");
    assert!(!files.is_empty(), "no fuzz/fuzz_targets/*.rs");
    let fuzz_manifest = manifest(&read("fuzz/Cargo.toml"));
    let bins: BTreeSet<String> = fuzz_manifest
        .iter()
        .filter(|(h, _)| h == "[bin]")
        .filter_map(|(_, kv)| value(kv, "name").map(str::to_owned))
        .collect();
    let readme = first_column(&table_after(
        &read("README.md"),
        "The targets (`fuzz/fuzz_targets/`)",
    ));
    let fuzz_readme = first_column(&table_after(&read("fuzz/README.md"), "| target |"));
    let problems: Vec<String> = [
        diff("fuzz/Cargo.toml [[bin]]s", &bins, &files),
        diff("README.md's fuzz target table", &readme, &files),
        diff("fuzz/README.md's target table", &fuzz_readme, &files),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(
        problems.is_empty(),
        "fuzz targets disagree with fuzz/fuzz_targets/*.rs {files:?}:\n{}",
        problems.join("\n")
    );
}

#[test]
fn programs_table_names_every_binary_and_example() {
    let actual: BTreeSet<Program> = members().iter().flat_map(|m| programs_of(m)).collect();
    let readme = read("README.md");
    let table: BTreeSet<Program> = table_after(&readme, "## Programs")
        .iter()
        .map(|r| Program {
            name: quoted(&r[0]).into_iter().next().unwrap_or_default(),
            krate: quoted(&r[1]).into_iter().next().unwrap_or_default(),
            example: r[0].contains("(example)"),
        })
        .collect();
    // "Benchmark and test programs, built with the workspace: `a`, `b` ...":
    // its program names, not its paths.
    let paragraph: String = readme
        .lines()
        .skip_while(|l| !l.starts_with("Benchmark and test programs"))
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        !paragraph.is_empty(),
        "README.md has no paragraph starting \"Benchmark and test programs\""
    );
    let others: BTreeSet<String> = quoted(&paragraph)
        .into_iter()
        .filter(|w| !w.contains('/') && !w.contains('.'))
        .collect();

    let mut problems = Vec::new();
    for p in actual.difference(&table) {
        if p.example || !others.contains(&p.name) {
            problems.push(format!(
                "{} ({}{}) is built but not listed",
                p.name,
                p.krate,
                if p.example { ", example" } else { "" }
            ));
        }
    }
    for p in table.difference(&actual) {
        problems.push(format!(
            "the table's row {} ({}{}) matches no program of that crate",
            p.name,
            p.krate,
            if p.example { ", example" } else { "" }
        ));
    }
    let bins: BTreeSet<&str> = actual
        .iter()
        .filter(|p| !p.example)
        .map(|p| p.name.as_str())
        .collect();
    for name in &others {
        if !bins.contains(name.as_str()) {
            problems.push(format!(
                "the benchmark and test programs name {name}, which no crate builds"
            ));
        }
        if table.iter().any(|p| &p.name == name) {
            problems.push(format!("{name} is both in the table and in the paragraph"));
        }
    }
    assert!(
        problems.is_empty(),
        "README.md's Programs section disagrees with the workspace:\n{}",
        problems.join("\n")
    );
}

#[test]
fn layout_names_every_crate_and_only_what_exists() {
    let readme = read("README.md");
    let block: Vec<&str> = readme
        .lines()
        .skip_while(|l| *l != "## Layout")
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert!(!block.is_empty(), "README.md has no Layout block");
    let named: BTreeSet<String> = block
        .iter()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .map(|w| w.trim_end_matches('/').to_owned())
        .collect();
    let mut problems = Vec::new();
    for n in &named {
        if !root().join(n).exists() {
            problems.push(format!("{n} is in the Layout block but not in the tree"));
        }
    }
    for m in members().into_iter().chain(["fuzz".to_owned()]) {
        if !named.contains(&m) {
            problems.push(format!("{m}/ is missing from the Layout block"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_quoted_repository_path_exists() {
    let root = root();
    let top: BTreeSet<String> = fs::read_dir(&root)
        .expect("read the workspace root")
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| n != "target")
        .collect();
    let missing: Vec<String> = quoted(&prose(&read("README.md")))
        .iter()
        .filter_map(|q| q.split_whitespace().next())
        .filter(|w| {
            w.contains('/')
                && !w.contains(['*', '<', '{', '['])
                && w.split('/').next().is_some_and(|first| top.contains(first))
        })
        .filter(|w| !root.join(w.trim_end_matches('/')).exists())
        .map(str::to_owned)
        .collect();
    assert!(
        missing.is_empty(),
        "README.md quotes paths that do not exist: {missing:?}"
    );
}
