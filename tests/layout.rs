//! The layout keeps its layers: no module of the library imports one that imports it back. The module graph is
//! read from the source: every `crate::…`, `super::…` and `self::…` path outside a file's test module (in `use`
//! lines, brace groups included, and inline paths) is an edge to the deepest module it names. A `mod` line is
//! no edge: a parent declaring its children is no import.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Module path (`flow::state`, `` for the crate root) of every library file under src/, the binaries aside.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display())) {
            let p = e.unwrap_or_else(|e| panic!("listing {}: {e}", dir.display())).path();
            let rel = p.strip_prefix(src).expect("under src").to_string_lossy().into_owned();
            if p.is_dir() {
                if rel != "bin" {
                    stack.push(p);
                }
                continue;
            }
            let Some(stem) = rel.strip_suffix(".rs") else { continue };
            // main.rs is the binary, not the library.
            if stem == "main" {
                continue;
            }
            let module = match stem {
                "lib" => String::new(),
                s => s.strip_suffix("/mod").unwrap_or(s).replace('/', "::"),
            };
            out.insert(module, p);
        }
    }
    out
}

/// The file's text before its `#[cfg(test)] mod tests` (a test module may reach anywhere).
fn production(text: &str) -> &str {
    let mut at = 0;
    while let Some(i) = text[at..].find("#[cfg(test)]") {
        let start = at + i;
        let rest = text[start + "#[cfg(test)]".len()..].trim_start();
        if rest.starts_with("mod ") {
            return &text[..start];
        }
        at = start + 1;
    }
    text
}

/// Comments and string literals blanked out, so a path in a doc line or a message is no edge.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if !in_str && c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' && !(prev == '\'' && chars.get(i + 1) == Some(&'\'')) {
                in_str = !in_str;
                kept.push(' ');
            } else {
                kept.push(if in_str { ' ' } else { c });
            }
            prev = if prev == '\\' && c == '\\' { ' ' } else { c };
            i += 1;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// Every path a `use` tree names, its brace groups expanded (`a::{b, c::d}` gives `a::b` and `a::c::d`).
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else { return vec![tree] };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    parts.push(cur);
    parts.into_iter().filter(|p| !p.is_empty()).flat_map(|p| expand_use(&format!("{prefix}{p}"))).collect()
}

/// The paths a file names that start at `crate`, `super` or `self`, each with how many inline `mod x { … }`
/// blocks it sits in (a `super` there first leaves those).
fn paths(code: &str) -> Vec<(String, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let word_at = |i: usize, w: &str| {
        chars[i..].iter().take(w.len()).copied().eq(w.chars())
            && (i == 0 || !(ident(chars[i - 1]) || chars[i - 1] == ':'))
    };
    let (mut out, mut depth, mut mods): (Vec<(String, usize)>, usize, Vec<usize>) = (Vec::new(), 0, Vec::new());
    let mut pending_mod = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            depth += 1;
            if pending_mod {
                mods.push(depth);
                pending_mod = false;
            }
        } else if c == '}' {
            if mods.last() == Some(&depth) {
                mods.pop();
            }
            depth = depth.saturating_sub(1);
        } else if c == ';' {
            pending_mod = false;
        }
        if word_at(i, "mod ") {
            pending_mod = true;
            i += 4;
            continue;
        }
        if word_at(i, "use ") {
            let end = chars[i..].iter().position(|c| *c == ';').map_or(chars.len(), |e| i + e);
            let tree: String = chars[i + 4..end].iter().collect();
            let t = tree.trim_start();
            if t.starts_with("crate::") || t.starts_with("super::") || t.starts_with("self::") {
                out.extend(expand_use(t).into_iter().map(|p| (p, mods.len())));
            }
            i = end;
            continue;
        }
        if word_at(i, "crate::") || word_at(i, "super::") {
            let mut j = i;
            while j < chars.len() && (ident(chars[j]) || chars[j] == ':') {
                j += 1;
            }
            let p: String = chars[i..j].iter().collect();
            out.push((p.trim_end_matches(':').to_string(), mods.len()));
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// The module a path names from module `from`, `nested` inline modules deep in its file: the deepest existing
/// module along it.
fn target(path: &str, from: &str, nested: usize, known: &BTreeMap<String, PathBuf>) -> Option<String> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<String> = if from.is_empty() { vec![] } else { from.split("::").map(String::from).collect() };
    match segs.first().copied() {
        Some("crate") => {
            base.clear();
            segs.remove(0);
        }
        Some("self") => {
            segs.remove(0);
        }
        Some("super") => {
            let mut nested = nested;
            while segs.first() == Some(&"super") {
                segs.remove(0);
                if nested > 0 {
                    nested -= 1;
                } else {
                    base.pop();
                }
            }
        }
        _ => return None,
    }
    let mut best = base.join("::");
    let mut cur = base;
    for s in segs {
        cur.push(s.to_string());
        let name = cur.join("::");
        if known.contains_key(&name) {
            best = name;
        } else {
            break;
        }
    }
    Some(best)
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let known = modules(&src);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, file) in &known {
        let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let code = code_only(production(&text));
        let edges = g.entry(m.clone()).or_default();
        for (p, nested) in paths(&code) {
            if let Some(t) = target(&p, m, nested, &known) {
                // A path into the module itself, or into the crate root (its macros), is no edge.
                if &t != m && !t.is_empty() {
                    edges.insert(t);
                }
            }
        }
    }
    g
}

/// Every cycle, each as its modules in order (one per strongly connected component).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut reported = BTreeSet::new();
    for start in g.keys() {
        if reported.contains(start) {
            continue;
        }
        // Breadth-first from `start`'s successors back to `start`: the shortest cycle through it.
        let mut prev: BTreeMap<String, String> = BTreeMap::new();
        let mut queue: std::collections::VecDeque<String> = g[start].iter().cloned().collect();
        for n in &queue {
            prev.insert(n.clone(), start.clone());
        }
        let mut found = false;
        while let Some(n) = queue.pop_front() {
            if &n == start {
                found = true;
                break;
            }
            for next in g.get(&n).into_iter().flatten() {
                if !prev.contains_key(next) {
                    prev.insert(next.clone(), n.clone());
                    queue.push_back(next.clone());
                }
            }
        }
        if found {
            let mut cycle = vec![start.clone()];
            let mut n = prev[start].clone();
            while &n != start {
                cycle.push(n.clone());
                n = prev[&n].clone();
            }
            cycle.reverse();
            cycle.rotate_right(1);
            reported.extend(cycle.iter().cloned());
            out.push(cycle);
        }
    }
    out
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let g = graph();
    // The reader itself must see the layers, or finding no cycle proves nothing.
    assert!(g["flow::journal"].contains("flow::context"), "the reader missed journal's imports: {g:?}");
    assert!(g["flow::state"].contains("flow::record"), "the reader missed state's imports: {g:?}");
    let found = cycles(&g);
    let shown: Vec<String> = found.iter().map(|c| format!("{} -> {}", c.join(" -> "), c[0])).collect();
    assert!(found.is_empty(), "import cycles among the crate's modules:\n{}", shown.join("\n"));
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let src = "use super::b::X;\nfn f() { crate::a::g(); }\n";
    let known: BTreeMap<String, PathBuf> = ["", "a", "b"].iter().map(|m| (m.to_string(), PathBuf::new())).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (p, nested) in paths(&code_only(src)) {
        g.entry("a".into()).or_default().extend(target(&p, "a", nested, &known).filter(|t| t != "a"));
    }
    g.entry("b".into()).or_default().insert("a".into());
    assert_eq!(g["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(cycles(&g), vec![vec!["a".to_string(), "b".to_string()]]);
    assert_eq!(expand_use("crate::x::{a, b::{c, d}}"), ["crate::x::a", "crate::x::b::c", "crate::x::b::d"]);
    // `super` inside an inline module is the file's own module.
    let inline: Vec<_> = paths(&code_only("pub mod fake {\n    use super::*;\n}\nuse super::b;\n"));
    assert_eq!(target(&inline[0].0, "a", inline[0].1, &known).as_deref(), Some("a"));
    assert_eq!(target(&inline[1].0, "a", inline[1].1, &known).as_deref(), Some("b"));
    // A path in a comment or a message is no import.
    assert!(paths(&code_only("// crate::a::b\nlet s = \"super::c\";\n")).is_empty());
}
