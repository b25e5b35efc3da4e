// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A lossless XML tree over `quick-xml` events, for editing a libvirt domain.
//!
//! The domain XML the sidecar receives goes back to libvirt as it returns
//! it, so what the sidecar does not touch must survive byte for byte:
//! elements and attributes it does not know, namespaces and prefixes
//! (KubeVirt's `<metadata><kubevirt xmlns="http://kubevirt.io">`),
//! comments, whitespace, entity references. Every element keeps its start
//! tag as it was read (raw attributes, raw namespace declarations); text and
//! everything else are kept as the events they were. Only the elements the
//! sidecar edits or creates are written anew.

use std::borrow::Cow;
use std::fmt;

use quick_xml::events::attributes::Attribute;
use quick_xml::events::{BytesEnd, BytesStart, BytesText, Event};
use quick_xml::name::QName;
use quick_xml::{Reader, Writer, XmlVersion};

/// The XML version values are read as: libvirt writes 1.0 documents.
const VERSION: XmlVersion = XmlVersion::Implicit1_0;

/// Why a document could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XmlError(pub String);

impl fmt::Display for XmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for XmlError {}

/// A node of the tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// An element and its content.
    Element(Element),
    /// Anything else (text, comment, CDATA, processing instruction,
    /// declaration, doctype, entity reference), kept as it was read.
    Other(Event<'static>),
}

/// An element: its start tag as read (or as built) and its children.
#[derive(Debug, Clone, PartialEq)]
pub struct Element {
    start: BytesStart<'static>,
    /// The children, in document order.
    pub children: Vec<Node>,
    /// Written as `<x/>` when it has no children (it was read that way, or
    /// it was built).
    empty: bool,
}

/// A whole document: the nodes around the root element, and the root.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Top-level nodes; exactly one is an [`Element`], the root.
    pub nodes: Vec<Node>,
}

impl Element {
    /// A new element `<name/>` without attributes.
    pub fn new(name: &str) -> Self {
        Self {
            start: BytesStart::new(name.to_owned()),
            children: Vec::new(),
            empty: true,
        }
    }

    /// A new element with `attrs` (values are escaped when written).
    pub fn with_attrs(name: &str, attrs: &[(&str, &str)]) -> Self {
        let mut e = Self::new(name);
        for (k, v) in attrs {
            e.start.push_attribute((*k, *v));
        }
        e
    }

    /// Appends `child` (builder style).
    pub fn with_child(mut self, child: Element) -> Self {
        self.children.push(Node::Element(child));
        self
    }

    /// The tag name as written, with its prefix if any.
    pub fn name(&self) -> &str {
        self.start.name().into_inner()
    }

    /// The value of attribute `key`, unescaped and normalised as an XML
    /// processor reads it; `None` when absent or malformed.
    pub fn attr(&self, key: &str) -> Option<String> {
        self.start
            .attributes()
            .flatten()
            .find(|a| a.key.as_ref() == key)
            .and_then(|a| a.normalized_value(VERSION).ok().map(|v| v.into_owned()))
    }

    /// Sets attribute `key` to `value`, keeping the other attributes (raw,
    /// in their order) and the position of `key` when it was there.
    pub fn set_attr(&mut self, key: &str, value: &str) {
        if self.attr(key).as_deref() == Some(value) {
            return;
        }
        // The others are written in double quotes: raw as read, but a value
        // read in single quotes that holds a `"` is read and escaped again.
        let old: Vec<(String, Cow<'_, str>)> = self
            .start
            .attributes()
            .flatten()
            .map(|a| {
                let v = if a.value.contains('"') {
                    let v = a.normalized_value(VERSION).unwrap_or_default();
                    Cow::Owned(quick_xml::escape::escape(v.as_ref()).into_owned())
                } else {
                    a.value
                };
                (a.key.as_ref().to_owned(), v)
            })
            .collect();
        let mut start = BytesStart::new(self.name().to_owned());
        let mut placed = false;
        for (k, v) in old {
            if k == key {
                if !placed {
                    start.push_attribute((key, value));
                    placed = true;
                }
            } else {
                start.push_attribute(Attribute {
                    key: QName(&k),
                    value: v,
                });
            }
        }
        if !placed {
            start.push_attribute((key, value));
        }
        self.start = start;
    }

    /// The child elements, in order.
    pub fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|n| match n {
            Node::Element(e) => Some(e),
            Node::Other(_) => None,
        })
    }

    /// The child elements, mutably.
    pub fn elements_mut(&mut self) -> impl Iterator<Item = &mut Element> {
        self.children.iter_mut().filter_map(|n| match n {
            Node::Element(e) => Some(e),
            Node::Other(_) => None,
        })
    }

    /// The first child element named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.elements().find(|e| e.name() == name)
    }

    /// The first child element named `name`, mutably.
    pub fn child_mut(&mut self, name: &str) -> Option<&mut Element> {
        self.elements_mut().find(|e| e.name() == name)
    }

    /// The element at `path` (child names) below this one.
    pub fn find(&self, path: &[&str]) -> Option<&Element> {
        path.iter().try_fold(self, |e, name| e.child(name))
    }

    /// The concatenated text content of the direct children (unescaped).
    pub fn text(&self) -> String {
        let mut s = String::new();
        for n in &self.children {
            match n {
                Node::Other(Event::Text(t)) => s.push_str(&t.xml_content(VERSION)),
                Node::Other(Event::CData(t)) => s.push_str(&t.xml_content(VERSION)),
                Node::Other(Event::GeneralRef(r)) => match resolve_ref(r) {
                    Some(c) => s.push(c),
                    None => {
                        s.push('&');
                        s.push_str(r);
                        s.push(';');
                    }
                },
                _ => {}
            }
        }
        s
    }

    /// The first child named `name`, appended (see [`Element::append`])
    /// when there is none.
    pub fn child_or_insert(&mut self, name: &str) -> &mut Element {
        let at = self.elements().position(|e| e.name() == name);
        let at = match at {
            Some(i) => i,
            None => {
                self.append(Element::new(name));
                self.elements().count() - 1
            }
        };
        self.elements_mut()
            .nth(at)
            .expect("the child was found or appended")
    }

    /// Appends `child` after the last child element, indented as that one
    /// is (the whitespace before it is repeated), so that a pretty-printed
    /// document stays so.
    pub fn append(&mut self, child: Element) {
        self.empty = false;
        let last_el = self
            .children
            .iter()
            .rposition(|n| matches!(n, Node::Element(_)));
        let indent = last_el.and_then(|i| match i.checked_sub(1).map(|j| &self.children[j]) {
            Some(Node::Other(Event::Text(t))) if t.bytes().all(|b| b.is_ascii_whitespace()) => {
                Some(t.clone())
            }
            _ => None,
        });
        let at = last_el.map_or(self.children.len(), |i| i + 1);
        let mut new = Vec::with_capacity(2);
        if let Some(t) = indent {
            new.push(Node::Other(Event::Text(t)));
        }
        new.push(Node::Element(child));
        self.children.splice(at..at, new);
    }

    /// Writes the element and its content.
    fn write(&self, w: &mut Writer<Vec<u8>>) -> Result<(), XmlError> {
        let err = |e: std::io::Error| XmlError(format!("cannot write XML: {e}"));
        if self.children.is_empty() && self.empty {
            return w
                .write_event(Event::Empty(self.start.borrow()))
                .map_err(err);
        }
        w.write_event(Event::Start(self.start.borrow()))
            .map_err(err)?;
        for c in &self.children {
            c.write(w)?;
        }
        let end = BytesEnd::new(self.name().to_owned());
        w.write_event(Event::End(end)).map_err(err)
    }

    /// The element serialised.
    pub fn to_xml(&self) -> String {
        let mut w = Writer::new(Vec::new());
        // Writing to a Vec cannot fail.
        let _ = self.write(&mut w);
        String::from_utf8_lossy(&w.into_inner()).into_owned()
    }
}

impl Node {
    fn write(&self, w: &mut Writer<Vec<u8>>) -> Result<(), XmlError> {
        match self {
            Node::Element(e) => e.write(w),
            Node::Other(ev) => w
                .write_event(ev.borrow())
                .map_err(|e| XmlError(format!("cannot write XML: {e}"))),
        }
    }
}

/// The character an entity or character reference (`amp`, `#38`, `#x26`)
/// stands for.
fn resolve_ref(name: &str) -> Option<char> {
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => {
            let n = name.strip_prefix('#')?;
            let code = match n.strip_prefix('x') {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => n.parse().ok()?,
            };
            char::from_u32(code)
        }
    }
}

/// Text with `s` escaped, as a node.
pub fn text_node(s: &str) -> Node {
    Node::Other(Event::Text(BytesText::new(s).into_owned()))
}

impl Document {
    /// Parses `xml` (UTF-8). Fails on malformed XML, mismatched or unclosed
    /// tags, and anything but exactly one root element.
    pub fn parse(xml: &[u8]) -> Result<Self, XmlError> {
        let text = std::str::from_utf8(xml)
            .map_err(|e| XmlError(format!("the domain XML is not UTF-8: {e}")))?;
        let mut reader = Reader::from_str(text);
        reader.config_mut().trim_text(false);
        reader.config_mut().check_end_names = true;
        let mut stack: Vec<Element> = Vec::new();
        let mut top: Vec<Node> = Vec::new();
        let push = |stack: &mut Vec<Element>, top: &mut Vec<Node>, n: Node| match stack.last_mut() {
            Some(parent) => parent.children.push(n),
            None => top.push(n),
        };
        loop {
            let pos = reader.buffer_position();
            let ev = reader
                .read_event()
                .map_err(|e| XmlError(format!("malformed XML at byte {pos}: {e}")))?;
            match ev {
                Event::Eof => break,
                Event::Start(s) => {
                    check_attrs(&s, pos)?;
                    stack.push(Element {
                        start: s.into_owned(),
                        children: Vec::new(),
                        empty: false,
                    });
                }
                Event::Empty(s) => {
                    check_attrs(&s, pos)?;
                    let e = Element {
                        start: s.into_owned(),
                        children: Vec::new(),
                        empty: true,
                    };
                    push(&mut stack, &mut top, Node::Element(e));
                }
                Event::End(_) => {
                    let e = stack
                        .pop()
                        .ok_or_else(|| XmlError(format!("unexpected end tag at byte {pos}")))?;
                    push(&mut stack, &mut top, Node::Element(e));
                }
                Event::Text(t) if stack.is_empty() => {
                    if !t.bytes().all(|b| b.is_ascii_whitespace()) {
                        return Err(XmlError(format!(
                            "text outside the root element at byte {pos}"
                        )));
                    }
                    top.push(Node::Other(Event::Text(t.into_owned())));
                }
                other => push(&mut stack, &mut top, Node::Other(other.into_owned())),
            }
        }
        if let Some(open) = stack.last() {
            return Err(XmlError(format!("unclosed element <{}>", open.name())));
        }
        let roots = top.iter().filter(|n| matches!(n, Node::Element(_))).count();
        if roots != 1 {
            return Err(XmlError(format!(
                "expected exactly one root element, found {roots}"
            )));
        }
        Ok(Self { nodes: top })
    }

    /// The root element.
    pub fn root(&self) -> &Element {
        self.nodes
            .iter()
            .find_map(|n| match n {
                Node::Element(e) => Some(e),
                Node::Other(_) => None,
            })
            .expect("a parsed document has one root")
    }

    /// The root element, mutably.
    pub fn root_mut(&mut self) -> &mut Element {
        self.nodes
            .iter_mut()
            .find_map(|n| match n {
                Node::Element(e) => Some(e),
                Node::Other(_) => None,
            })
            .expect("a parsed document has one root")
    }

    /// The document serialised.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::new(Vec::new());
        for n in &self.nodes {
            // Writing to a Vec cannot fail.
            let _ = n.write(&mut w);
        }
        w.into_inner()
    }
}

/// Rejects duplicate or malformed attributes up front, so that later
/// lookups see well-formed ones.
fn check_attrs(s: &BytesStart<'_>, pos: u64) -> Result<(), XmlError> {
    for a in s.attributes() {
        let a = a.map_err(|e| XmlError(format!("malformed attribute at byte {pos}: {e}")))?;
        a.normalized_value(VERSION)
            .map_err(|e| XmlError(format!("malformed attribute value at byte {pos}: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "<?xml version=\"1.0\"?>\n<!-- c -->\n<domain type=\"kvm\" xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n\t<metadata>\n\t\t<kubevirt xmlns=\"http://kubevirt.io\"><uid>u&amp;1</uid></kubevirt>\n\t</metadata>\n\t<devices>\n\t\t<disk type='file'><![CDATA[x<y]]></disk>\n\t</devices>\n\t<qemu:commandline><qemu:arg value='-x'/></qemu:commandline>\n</domain>\n";

    #[test]
    fn round_trip_is_byte_exact() {
        let d = Document::parse(DOC.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(d.to_bytes()).unwrap(), DOC);
        assert_eq!(
            d.root()
                .find(&["metadata", "kubevirt", "uid"])
                .unwrap()
                .text(),
            "u&1"
        );
    }

    #[test]
    fn text_is_read_as_xml_reads_it() {
        let d = Document::parse(b"<a>x\r\ny&#65;&amp;<![CDATA[<z>]]>&custom;</a>").unwrap();
        assert_eq!(d.root().text(), "x\nyA&<z>&custom;");
    }

    #[test]
    fn append_repeats_the_indentation() {
        let mut d = Document::parse(DOC.as_bytes()).unwrap();
        let devices = d.root_mut().child_mut("devices").unwrap();
        devices.append(Element::with_attrs("interface", &[("type", "vhostuser")]));
        let out = String::from_utf8(d.to_bytes()).unwrap();
        assert!(out
            .contains("<![CDATA[x<y]]></disk>\n\t\t<interface type=\"vhostuser\"/>\n\t</devices>"));
    }

    #[test]
    fn set_attr_keeps_the_others_raw() {
        let mut d = Document::parse(b"<a x='1&amp;' y=\"2\"/>").unwrap();
        d.root_mut().set_attr("y", "3");
        d.root_mut().set_attr("z", "<");
        assert_eq!(d.to_bytes(), b"<a x=\"1&amp;\" y=\"3\" z=\"&lt;\"/>");
        let mut d = Document::parse(b"<a q='say \"hi\"'/>").unwrap();
        d.root_mut().set_attr("r", "1");
        assert_eq!(d.to_bytes(), b"<a q=\"say &quot;hi&quot;\" r=\"1\"/>");
        // Raw: a tab, a character reference and an entity stay as written
        // (a reader normalises the tab to a space).
        let mut d = Document::parse(b"<a x='1\t&#10;2' y=\"&lt;\"/>").unwrap();
        assert_eq!(d.root().attr("x").as_deref(), Some("1 \n2"));
        d.root_mut().set_attr("z", "1");
        assert_eq!(d.to_bytes(), b"<a x=\"1\t&#10;2\" y=\"&lt;\" z=\"1\"/>");
    }

    #[test]
    fn malformed_documents_are_refused() {
        for bad in [
            &b"<a><b></a>"[..],
            b"<a>",
            b"<a/><b/>",
            b"",
            b"text",
            b"<a x='1' x='2'/>",
            b"<a x='&bogus;'/>",
            b"\xff<a/>",
        ] {
            assert!(
                Document::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
