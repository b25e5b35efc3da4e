// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The API's OpenAPI 3 document: written as `docs/control-api.yaml`, built
//! into the binary, served as JSON at `GET /openapi.json`. A test keeps it
//! and the route table in step.

/// The document as written.
pub const YAML: &str = include_str!("../../../docs/control-api.yaml");

/// The document as JSON.
///
/// # Panics
/// If the YAML built in does not parse: a build defect the unit tests catch.
pub fn json() -> String {
    let v: serde_json::Value =
        serde_yaml_ng::from_str(YAML).expect("docs/control-api.yaml is valid YAML (unit-tested)");
    serde_json::to_string(&v).expect("a JSON value serializes")
}

#[cfg(test)]
mod tests {
    use super::super::routes::ROUTES;
    use super::*;

    #[test]
    fn document_and_route_table_agree() {
        let doc: serde_json::Value = serde_json::from_str(&json()).unwrap();
        assert_eq!(doc["openapi"], "3.0.3");
        let paths = doc["paths"].as_object().unwrap();
        for (pattern, methods) in ROUTES {
            let p = pattern.replace("{}", "{name}");
            let item = paths
                .get(&p)
                .unwrap_or_else(|| panic!("{p} is not documented"));
            let mut documented: Vec<String> = item
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| *k != "parameters")
                .map(|k| k.to_uppercase())
                .collect();
            documented.sort();
            let mut routed: Vec<String> = methods.iter().map(|m| m.to_string()).collect();
            routed.sort();
            assert_eq!(documented, routed, "methods of {p}");
        }
        assert_eq!(
            paths.len(),
            ROUTES.len(),
            "documented paths without a route"
        );
        // What every request body and every port name can get, documented;
        // the 400 that every route answers to an unknown query parameter and
        // the 403 it answers to a peer that is neither root nor the switch's
        // user.
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                if method == "parameters" {
                    continue;
                }
                let codes: Vec<&str> = op["responses"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(String::as_str)
                    .collect();
                let mut want = vec!["400", "403"];
                if !op["requestBody"].is_null() {
                    want.extend(["413", "415", "422"]);
                }
                if path.contains("{name}") {
                    want.push("404");
                }
                for w in want {
                    assert!(codes.contains(&w), "{method} {path} does not document {w}");
                }
            }
        }
        // Every $ref points at something.
        let text = json();
        for r in text.split("\"$ref\":\"#/").skip(1) {
            let target = r.split('"').next().unwrap();
            let mut v = &doc;
            for seg in target.split('/') {
                v = &v[seg];
            }
            assert!(!v.is_null(), "dangling $ref #/{target}");
        }
    }
}
