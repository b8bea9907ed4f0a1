//! Guards the module layering: no cycle of imports between the crate's top-level modules
//! (`src/<folder>/` or `src/<file>.rs`), none through a subfolder inside any folder (the
//! modules of `backend/`, `quant/`, …), the CPU and GPU backends named only by `Device`, and in
//! the SIMD code `kernels` → `quant` → `simd`.
//!
//! Cycles: every path out of a file's module to the crate root (`crate::x`, a `super::` chain
//! that reaches the root) is an arrow from the file's top-level module to `x`; comments are
//! left out (a doc link is not an import). The arrows must form no cycle; a failure names
//! each cycle and, per arrow in it, a line that makes it.
//!
//! The per-format SIMD kernels in `src/quant/<format>/` are built from the shared building
//! blocks in `src/simd/`, and `src/kernels/` puts the per-format kernels into its run-time table.
//! `quant` used to import those building blocks from `kernels`, which imports `quant`: a cycle.
//! This test reads the sources and fails, naming the file and line, if
//! - a file under `src/quant/` refers to `crate::kernels` (or reaches it through `super::`), or
//! - a file under `src/simd/` refers to anything in the crate outside `simd` (`crate::quant`,
//!   `crate::kernels`, ...): `simd` is the bottom layer and imports nothing above it.
//!
//! The check is textual and includes comments, so a doc comment in those directories names the
//! other modules without the `crate::` prefix.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// How deep the module of the file at `rel` (relative to `src/`) sits below the crate root:
/// `simd/mod.rs` is 1 (`crate::simd`), `simd/x86.rs` 2, `quant/q4_0/x86.rs` 3.
fn module_depth(rel: &Path) -> usize {
    let n = rel.components().count();
    match rel.file_name().and_then(|f| f.to_str()) {
        Some("mod.rs") => n - 1,
        _ => n,
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The crate-root modules named by the path that starts at byte `at` of `src` (just after
/// `crate::` or a `super::` chain that reaches the root): one identifier, or the first
/// identifier of each item of a `{ ... }` group (`*` and `self` come back as themselves).
fn root_segments(src: &str, at: usize) -> Vec<String> {
    let rest = &src[at..];
    let ident = |s: &str| -> String {
        let s = s.trim_start();
        if s.starts_with('*') {
            return "*".into();
        }
        s.chars().take_while(|&c| is_ident_char(c)).collect()
    };
    if !rest.trim_start().starts_with('{') {
        return vec![ident(rest)];
    }
    let open = at + rest.find('{').unwrap();
    let mut segs = Vec::new();
    let mut depth = 0usize;
    let mut item_start = true;
    for (i, c) in src[open..].char_indices() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    item_start = true;
                    continue;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => {
                item_start = true;
                continue;
            }
            _ => {}
        }
        if depth == 1 && item_start && !c.is_whitespace() {
            let seg = ident(&src[open + i..]);
            if !seg.is_empty() {
                segs.push(seg);
            }
            item_start = false;
        }
    }
    segs
}

/// Every path in `src` that leaves the file's module for the crate root (`crate::`, `$crate::`
/// or enough `super::`s), as `(line, root module)`.
fn root_paths(src: &str, depth: usize) -> Vec<(usize, String)> {
    let line_of = |at: usize| src[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    for (at, _) in src.match_indices("crate::") {
        if src[..at].chars().next_back().is_some_and(is_ident_char) {
            continue; // e.g. `my_crate::`; `$crate::` counts
        }
        for seg in root_segments(src, at + "crate::".len()) {
            out.push((line_of(at), seg));
        }
    }
    let mut at = 0;
    while let Some(i) = src[at..].find("super::") {
        let start = at + i;
        let before = src[..start].chars().next_back();
        let mut end = start;
        let mut chain = 0;
        while src[end..].starts_with("super::") {
            chain += 1;
            end += "super::".len();
        }
        if !before.is_some_and(is_ident_char) && chain == depth {
            for seg in root_segments(src, end) {
                out.push((line_of(start), seg));
            }
        }
        at = end;
    }
    out.sort();
    out
}

/// The layering violations of the file at `rel` (relative to `src/`) with source `src`, one
/// message per offending line: in `quant/`, any path to `kernels`; in `simd/`, any path to a
/// crate module other than `simd` (a glob of the root, as `use super::*` in a test module of
/// `simd/mod.rs`, is let through); in both, the words `crate::kernels` (and in `simd/`
/// `crate::quant`) anywhere, comments included, as `grep` would find them.
fn violations(rel: &Path, src: &str) -> Vec<String> {
    let top = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap();
    let (bad_path, words): (fn(&str) -> bool, &[&str]) = match top {
        "quant" => (|seg| seg == "kernels", &["crate::kernels"]),
        "simd" => (
            |seg| !matches!(seg, "simd" | "*"),
            &["crate::kernels", "crate::quant"],
        ),
        _ => (|_| false, &[]),
    };
    let mut bad_lines: Vec<(usize, String)> = root_paths(src, module_depth(rel))
        .into_iter()
        .filter(|(_, seg)| bad_path(seg))
        .map(|(line, seg)| (line, format!("a path into `{seg}`")))
        .collect();
    for (i, line) in src.lines().enumerate() {
        for w in words {
            if line.contains(w) {
                bad_lines.push((i + 1, format!("`{w}`")));
            }
        }
    }
    bad_lines.sort();
    bad_lines.dedup_by_key(|(line, _)| *line);
    bad_lines
        .into_iter()
        .map(|(line, what)| {
            let text = src.lines().nth(line - 1).unwrap_or("").trim();
            format!("src/{}:{line}: {what} in `{top}`: {text}", rel.display())
        })
        .collect()
}

#[test]
fn quant_and_simd_do_not_import_upwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    let mut errors = Vec::new();
    for dir in ["quant", "simd"] {
        for path in rust_files(&src.join(dir)) {
            let text = std::fs::read_to_string(&path).unwrap();
            let rel = path.strip_prefix(&src).unwrap();
            errors.extend(violations(rel, &text));
            checked += 1;
        }
    }
    // the layout this test assumes is still there
    for f in ["simd/mod.rs", "simd/x86.rs", "simd/neon.rs", "quant/mod.rs"] {
        assert!(
            src.join(f).is_file(),
            "src/{f} is missing: update tests/layering.rs"
        );
    }
    assert!(
        checked > 40,
        "only {checked} files under src/quant and src/simd"
    );
    assert!(
        errors.is_empty(),
        "layering is `kernels` → `quant` → `simd` (see src/simd/mod.rs); imports going up:\n{}",
        errors.join("\n")
    );
}

#[test]
fn the_check_catches_upward_paths() {
    let q = Path::new("quant/q4_0/x86.rs");
    let s = Path::new("simd/x86.rs");
    let found = |rel: &Path, src: &str| violations(rel, src).len();
    assert_eq!(found(q, "use crate::kernels::x86::*;"), 1);
    assert_eq!(
        found(
            q,
            "use crate::{\n    kernels::pack,\n    quant::GgmlType,\n};"
        ),
        1
    );
    assert_eq!(found(q, "use super::super::super::kernels::ActRows;"), 1);
    assert_eq!(found(q, "dot($crate::kernels::neon::Emul, n, w, a)"), 1);
    assert_eq!(found(q, "/// see `crate::kernels`"), 1);
    assert_eq!(
        found(
            q,
            "use crate::simd::x86::*;\nuse crate::quant::q8_0::BlockQ8_0;"
        ),
        0
    );
    assert_eq!(
        found(q, "use super::{BlockQ4_0, QK};\n/// the `kernels` docs"),
        0
    );
    assert_eq!(found(s, "use crate::quant::{Block, as_blocks};"), 1);
    assert_eq!(found(s, "use crate::{simd::ActRows, kernels::pack};"), 1);
    assert_eq!(found(s, "use super::super::quant::Block;"), 1);
    assert_eq!(
        found(Path::new("simd/mod.rs"), "use super::quant::Block;"),
        1
    );
    assert_eq!(
        found(
            s,
            "use super::PACKED_BLOCK_BYTES;\n$crate::simd::neon::Emul"
        ),
        0
    );
    assert_eq!(found(s, "/// see `quant::Block` and `kernels::pack`"), 0);
}

/// `src` without its `//` comments (a `//` inside a string cuts the rest of that line too,
/// which can only hide an arrow, never invent one).
fn without_comments(src: &str) -> String {
    src.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Strongly connected components of more than one node (Tarjan), each sorted.
fn cycles(nodes: &[String], edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.edges.get(v) {
            for w in ws {
                if !t.index.contains_key(w.as_str()) {
                    visit(t, w);
                    let lw = t.low[w.as_str()];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w.as_str()) {
                    let iw = t.index[w.as_str()];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for n in nodes {
        if !t.index.contains_key(n.as_str()) {
            visit(&mut t, n);
        }
    }
    t.out
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut nodes: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            if p.is_dir() {
                Some(name)
            } else {
                let stem = name.strip_suffix(".rs")?;
                (stem != "lib").then(|| stem.to_string())
            }
        })
        .collect();
    nodes.sort();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // (from, to) -> the first line that makes the arrow
    let mut why: BTreeMap<(String, String), String> = BTreeMap::new();
    let files = rust_files(&src);
    for path in &files {
        let rel = path.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let top = first.strip_suffix(".rs").unwrap_or(first).to_string();
        if top == "lib" {
            continue;
        }
        let text = without_comments(&std::fs::read_to_string(path).unwrap());
        for (line, seg) in root_paths(&text, module_depth(rel)) {
            if seg == top || !nodes.contains(&seg) {
                continue;
            }
            edges.entry(top.clone()).or_default().insert(seg.clone());
            why.entry((top.clone(), seg))
                .or_insert_with(|| format!("src/{}:{line}", rel.display()));
        }
    }
    assert!(
        files.len() > 200 && nodes.len() > 20,
        "the tree this test reads is not there"
    );
    assert!(
        edges.values().map(BTreeSet::len).sum::<usize>() > 40,
        "too few arrows: {edges:?}"
    );
    let found = cycles(&nodes, &edges);
    let report: Vec<String> = found
        .iter()
        .map(|c| {
            let arrows: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    edges[a]
                        .iter()
                        .filter(|b| c.contains(b))
                        .map(|b| format!("{a} -> {b} ({})", why[&(a.clone(), b.clone())]))
                        .collect::<Vec<_>>()
                })
                .collect();
            format!("cycle {c:?}: {}", arrows.join(", "))
        })
        .collect();
    assert!(
        report.is_empty(),
        "imports between top-level modules form cycles:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_cycle_check_finds_cycles() {
    let nodes: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let arrow = |e: &mut BTreeMap<String, BTreeSet<String>>, a: &str, b: &str| {
        e.entry(a.into()).or_default().insert(b.into());
    };
    arrow(&mut edges, "a", "b");
    arrow(&mut edges, "b", "c");
    arrow(&mut edges, "c", "d");
    assert!(cycles(&nodes, &edges).is_empty());
    arrow(&mut edges, "d", "b");
    assert_eq!(cycles(&nodes, &edges), vec![vec!["b", "c", "d"]]);
    let text = without_comments("use crate::x; // crate::y\n/// [`crate::z`]\nfn f() {}");
    let segs: Vec<String> = root_paths(&text, 1).into_iter().map(|(_, s)| s).collect();
    assert_eq!(segs, vec!["x"]);
}

/// The module path of the file at `rel` (relative to `src/`): `backend/gpu/kv.rs` is
/// `backend::gpu::kv`, `backend/mod.rs` is `backend`, `lib.rs` the root.
fn module_path(rel: &Path) -> Vec<String> {
    let mut segs: Vec<String> = rel
        .iter()
        .map(|c| c.to_str().unwrap().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
        segs.pop();
    }
    segs
}

/// The paths of the use tree (or expression path) starting at byte `at` of `src`, each as its
/// segments: `a::{b, c::d}` gives `a::b` and `a::c::d`; a path ends where its identifiers do.
fn tree_paths(src: &str, at: usize) -> (Vec<Vec<String>>, usize) {
    let b = src.as_bytes();
    let skip_ws = |mut i: usize| {
        while i < b.len() && (b[i] as char).is_whitespace() {
            i += 1;
        }
        i
    };
    let mut i = skip_ws(at);
    if i < b.len() && b[i] == b'{' {
        let mut out = Vec::new();
        i += 1;
        loop {
            i = skip_ws(i);
            if i >= b.len() || b[i] == b'}' {
                return (out, i + 1);
            }
            let (sub, j) = tree_paths(src, i);
            out.extend(sub);
            // past an `as` rename to the item's end
            i = j;
            while i < b.len() && !matches!(b[i], b',' | b'}') {
                i += 1;
            }
            if i < b.len() && b[i] == b',' {
                i += 1;
            }
        }
    }
    if i < b.len() && b[i] == b'*' {
        return (vec![vec!["*".into()]], i + 1);
    }
    let start = i;
    while i < b.len() && is_ident_char(b[i] as char) {
        i += 1;
    }
    let ident = src[start..i].to_string();
    if ident.is_empty() {
        return (vec![vec![]], i);
    }
    if src[i..].starts_with("::") {
        let (subs, j) = tree_paths(src, i + 2);
        let out = subs
            .into_iter()
            .map(|mut s| {
                s.insert(0, ident.clone());
                s
            })
            .collect();
        return (out, j);
    }
    (vec![vec![ident]], i)
}

/// Every module path the file at module path `me` names, resolved from the crate root
/// (`crate::`, `super::` chains, `self::`), with its line. Paths inside a file's inline modules
/// resolve as if written at the file's level, which can only add an arrow to a name that is
/// not a module of the folder (and so is ignored).
fn resolved_paths(src: &str, me: &[String]) -> Vec<(usize, Vec<String>)> {
    let line_of = |at: usize| src[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let starts = ["crate::", "super::", "self::"];
    let mut at = 0;
    while at < src.len() {
        let Some((i, kind)) = starts
            .iter()
            .filter_map(|k| src[at..].find(k).map(|i| (at + i, *k)))
            .min()
        else {
            break;
        };
        if src[..i].chars().next_back().is_some_and(is_ident_char) {
            at = i + kind.len();
            continue;
        }
        let (base, mut end): (Vec<String>, usize) = match kind {
            "crate::" => (Vec::new(), i + kind.len()),
            "self::" => (me.to_vec(), i + kind.len()),
            _ => {
                let mut end = i;
                let mut chain = 0;
                while src[end..].starts_with("super::") {
                    chain += 1;
                    end += "super::".len();
                }
                if chain > me.len() {
                    at = end;
                    continue;
                }
                (me[..me.len() - chain].to_vec(), end)
            }
        };
        let (paths, j) = tree_paths(src, end);
        for p in paths {
            let mut full = base.clone();
            full.extend(p);
            out.push((line_of(i), full));
        }
        end = end.max(j);
        at = end;
    }
    out
}

/// Arrows between the modules directly inside the folder at module path `folder` (its files
/// and subfolders; its own `mod.rs`, which declares and re-exports them, is not one): `a -> b`
/// where a file of `a` names a path into `b`, with the first line that does.
fn folder_arrows(
    src_dir: &Path,
    files: &[PathBuf],
    folder: &[String],
) -> (Vec<String>, BTreeMap<(String, String), String>) {
    let mut children = BTreeSet::new();
    let mut why: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut per_file = Vec::new();
    for path in files {
        let rel = path.strip_prefix(src_dir).unwrap();
        let me = module_path(rel);
        if me.len() <= folder.len() || me[..folder.len()] != *folder {
            continue;
        }
        children.insert(me[folder.len()].clone());
        per_file.push((rel.to_path_buf(), me));
    }
    for (rel, me) in per_file {
        let text = without_comments(&std::fs::read_to_string(src_dir.join(&rel)).unwrap());
        let from = &me[folder.len()];
        for (line, p) in resolved_paths(&text, &me) {
            if p.len() <= folder.len() || p[..folder.len()] != *folder {
                continue;
            }
            let to = &p[folder.len()];
            if to != from && children.contains(to) {
                why.entry((from.clone(), to.clone()))
                    .or_insert_with(|| format!("src/{}:{line}", rel.display()));
            }
        }
    }
    (children.into_iter().collect(), why)
}

/// Inside a folder, the modules a module may not be named by, except from the listed ones:
/// the CPU and GPU backends are reached through the seam (`Device` picks one), never from
/// each other or from the types they share.
const ONLY_FROM: &[(&str, &str, &[&str])] = &[
    ("backend", "cpu", &["device"]),
    ("backend", "gpu", &["device"]),
];

#[test]
fn no_import_cycle_inside_any_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    let mut folders: BTreeSet<Vec<String>> = BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let dirs: Vec<String> = rel
            .parent()
            .unwrap()
            .iter()
            .map(|c| c.to_str().unwrap().to_string())
            .collect();
        for n in 1..=dirs.len() {
            folders.insert(dirs[..n].to_vec());
        }
    }
    assert!(
        folders.len() > 15,
        "the folders this test reads are not there"
    );
    let mut report = Vec::new();
    let mut n_arrows = 0;
    for folder in &folders {
        let (nodes, why) = folder_arrows(&src, &files, folder);
        let subfolders: BTreeSet<&String> = folders
            .iter()
            .filter(|f| f.len() == folder.len() + 1 && f[..folder.len()] == folder[..])
            .map(|f| &f[folder.len()])
            .collect();
        n_arrows += why.len();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in why.keys() {
            edges.entry(a.clone()).or_default().insert(b.clone());
        }
        for c in cycles(&nodes, &edges) {
            // files of one module naming each other (a scheduler and its slots) are parts of
            // one unit; a cycle through a subfolder ties units together
            if !c.iter().any(|n| subfolders.contains(n)) {
                continue;
            }
            let arrows: Vec<String> = why
                .iter()
                .filter(|((a, b), _)| c.contains(a) && c.contains(b))
                .map(|((a, b), at)| format!("{a} -> {b} ({at})"))
                .collect();
            report.push(format!(
                "cycle in src/{}/: {}",
                folder.join("/"),
                arrows.join(", ")
            ));
        }
        for (f, target, allowed) in ONLY_FROM {
            if folder.join("/") != *f {
                continue;
            }
            for ((a, b), at) in &why {
                if b == target && !allowed.contains(&a.as_str()) {
                    report.push(format!(
                        "src/{f}/{a} names {target} ({at}): only {allowed:?} may"
                    ));
                }
            }
        }
    }
    assert!(n_arrows > 60, "too few arrows inside folders: {n_arrows}");
    assert!(
        report.is_empty(),
        "imports inside folders break the layering:\n{}",
        report.join("\n")
    );
}

#[test]
fn nested_paths_resolve() {
    let me: Vec<String> = ["backend", "gpu", "kv"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let src = "use super::super::{cpu::KvLayer, moe::{self, choose}};\nuse crate::quant::q8_0 as q;\nfn f() { self::g(); crate::backend::turbo::go(1) }";
    let got: Vec<(usize, String)> = resolved_paths(src, &me)
        .into_iter()
        .map(|(l, p)| (l, p.join("::")))
        .collect();
    let want = [
        (1, "backend::cpu::KvLayer"),
        (1, "backend::moe::self"),
        (1, "backend::moe::choose"),
        (2, "quant::q8_0"),
        (3, "backend::gpu::kv::g"),
        (3, "backend::turbo::go"),
    ];
    assert_eq!(
        got,
        want.iter()
            .map(|(l, p)| (*l, p.to_string()))
            .collect::<Vec<_>>()
    );
}
