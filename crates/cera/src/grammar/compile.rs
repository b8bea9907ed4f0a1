//! Syntax tree → the flat rule table the matcher runs on.
//!
//! Every rule becomes a list of alternatives; an alternative is a run of elements (a character
//! class or a rule reference) ended by `End`, all stored in one array so a position is one
//! `u32`. Groups and repetitions become anonymous rules: `x*` is `R ::= x R | ε` (right
//! recursion, so the matcher's stacks do not grow), `x{2,4}` is `x x O2` with
//! `O2 ::= x O1 | ε`, `O1 ::= x | ε`. Checks: undefined rules (with line and column), a
//! missing `root`, and left recursion, which a top-down matcher cannot run.

use std::collections::HashMap;

use super::parse::{Node, RuleDef};
use super::{CharClass, Elem, Grammar};
use crate::error::{Error, Result};

struct Builder {
    elems: Vec<Elem>,
    rules: Vec<Vec<u32>>,
    names: Vec<String>,
    classes: Vec<CharClass>,
    class_ids: HashMap<Vec<(u32, u32)>, u32>,
    ids: HashMap<String, u32>,
    /// Alternatives of rules being built, before they are laid out in `elems`.
    pending: Vec<Vec<Vec<Elem>>>,
    /// Elements emitted so far (repetitions multiply them).
    size: usize,
}

/// Most elements a compiled grammar may have (`("a"{9999}){9999}` would need 10⁸).
const MAX_ELEMS: usize = 4_000_000;

pub(crate) fn compile(defs: &[RuleDef], root: &str) -> Result<Grammar> {
    let mut b = Builder {
        elems: Vec::new(),
        rules: Vec::new(),
        names: Vec::new(),
        classes: Vec::new(),
        class_ids: HashMap::new(),
        ids: HashMap::new(),
        pending: Vec::new(),
        size: 0,
    };
    for d in defs {
        if b.ids.contains_key(&d.name) {
            return Err(Error::Grammar(format!(
                "line {}, column {}: rule '{}' is defined twice",
                d.line, d.col, d.name
            )));
        }
        let id = b.new_rule(d.name.clone());
        b.ids.insert(d.name.clone(), id);
    }
    let Some(&root_id) = b.ids.get(root) else {
        return Err(Error::Grammar(format!("the grammar has no '{root}' rule")));
    };
    for d in defs {
        let id = b.ids[&d.name];
        let alts = b.alternatives(&d.body, &d.name)?;
        b.pending[id as usize] = alts;
    }
    // lay out every rule's alternatives
    let mut rules = Vec::with_capacity(b.pending.len());
    for alts in std::mem::take(&mut b.pending) {
        let mut starts = Vec::with_capacity(alts.len());
        for alt in alts {
            starts.push(b.elems.len() as u32);
            b.elems.extend(alt);
            b.elems.push(Elem::End);
        }
        rules.push(starts);
    }
    b.rules = rules;
    let g = Grammar {
        elems: b.elems,
        rules: b.rules,
        names: b.names,
        classes: b.classes,
        root: root_id,
    };
    check_left_recursion(&g)?;
    Ok(g)
}

impl Builder {
    fn new_rule(&mut self, name: String) -> u32 {
        self.names.push(name);
        self.pending.push(Vec::new());
        (self.names.len() - 1) as u32
    }

    fn class(&mut self, ranges: &[(u32, u32)]) -> u32 {
        if let Some(&id) = self.class_ids.get(ranges) {
            return id;
        }
        let id = self.classes.len() as u32;
        self.classes.push(CharClass::new(ranges.to_vec()));
        self.class_ids.insert(ranges.to_vec(), id);
        id
    }

    fn alternatives(&mut self, node: &Node, owner: &str) -> Result<Vec<Vec<Elem>>> {
        match node {
            Node::Alt(alts) => alts
                .iter()
                .map(|a| {
                    let mut seq = Vec::new();
                    self.sequence(a, owner, &mut seq)?;
                    Ok(seq)
                })
                .collect(),
            _ => {
                let mut seq = Vec::new();
                self.sequence(node, owner, &mut seq)?;
                Ok(vec![seq])
            }
        }
    }

    fn anonymous(&mut self, alts: Vec<Vec<Elem>>, owner: &str, kind: &str) -> u32 {
        let n = self.names.len();
        let id = self.new_rule(format!("{owner}/{kind}-{n}"));
        self.pending[id as usize] = alts;
        id
    }

    /// One element standing for `node` (a class, a reference, or an anonymous rule).
    fn single(&mut self, node: &Node, owner: &str) -> Result<Elem> {
        Ok(match node {
            Node::Chars(r) => Elem::Class(self.class(r)),
            Node::Ref { .. } => {
                let mut v = Vec::new();
                self.sequence(node, owner, &mut v)?;
                v[0]
            }
            _ => {
                let alts = self.alternatives(node, owner)?;
                Elem::Ref(self.anonymous(alts, owner, "group"))
            }
        })
    }

    fn sequence(&mut self, node: &Node, owner: &str, out: &mut Vec<Elem>) -> Result<()> {
        match node {
            Node::Seq(items) => {
                for it in items {
                    self.sequence(it, owner, out)?;
                }
            }
            Node::Chars(r) => {
                let id = self.class(r);
                out.push(Elem::Class(id));
            }
            Node::Ref { name, line, col } => match self.ids.get(name) {
                Some(&id) => out.push(Elem::Ref(id)),
                None => {
                    return Err(Error::Grammar(format!(
                        "line {line}, column {col}: undefined rule '{name}' (used in '{owner}')"
                    )));
                }
            },
            Node::Alt(_) => {
                let alts = self.alternatives(node, owner)?;
                out.push(Elem::Ref(self.anonymous(alts, owner, "group")));
            }
            Node::Repeat { node, min, max } => {
                let item = self.single(node, owner)?;
                self.size += *min as usize + max.map_or(2, |m| 2 * (m - min) as usize);
                if self.size > MAX_ELEMS {
                    return Err(Error::Grammar(format!(
                        "the grammar is too large (rule '{owner}' expands past {MAX_ELEMS} elements)"
                    )));
                }
                for _ in 0..*min {
                    out.push(item);
                }
                match max {
                    None => {
                        // R ::= item R | ε
                        let id = self.anonymous(Vec::new(), owner, "star");
                        self.pending[id as usize] = vec![vec![item, Elem::Ref(id)], Vec::new()];
                        out.push(Elem::Ref(id));
                    }
                    Some(max) if *max > *min => {
                        let mut inner: Option<u32> = None;
                        for _ in 0..(max - min) {
                            let mut first = vec![item];
                            if let Some(i) = inner {
                                first.push(Elem::Ref(i));
                            }
                            inner = Some(self.anonymous(vec![first, Vec::new()], owner, "opt"));
                        }
                        if let Some(i) = inner {
                            out.push(Elem::Ref(i));
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }
}

/// Rejects rules that can reach themselves without consuming a character.
fn check_left_recursion(g: &Grammar) -> Result<()> {
    let n = g.rules.len();
    let mut nullable = vec![false; n];
    loop {
        let mut changed = false;
        for r in 0..n {
            if nullable[r] {
                continue;
            }
            let yes = g.rules[r].iter().any(|&start| {
                let mut p = start as usize;
                loop {
                    match g.elems[p] {
                        Elem::End => return true,
                        Elem::Class(_) => return false,
                        Elem::Ref(s) if nullable[s as usize] => p += 1,
                        Elem::Ref(_) => return false,
                    }
                }
            });
            if yes {
                nullable[r] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // edges: rules reachable at the left edge of each rule
    let mut edges: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (r, e) in edges.iter_mut().enumerate() {
        for &start in &g.rules[r] {
            let mut p = start as usize;
            while let Elem::Ref(s) = g.elems[p] {
                e.push(s);
                if !nullable[s as usize] {
                    break;
                }
                p += 1;
            }
        }
    }
    // depth-first search for a cycle: 0 unvisited, 1 on the path, 2 done
    let mut mark = vec![0u8; n];
    let mut path: Vec<u32> = Vec::new();
    fn visit(r: u32, edges: &[Vec<u32>], mark: &mut [u8], path: &mut Vec<u32>) -> Option<Vec<u32>> {
        mark[r as usize] = 1;
        path.push(r);
        for &s in &edges[r as usize] {
            match mark[s as usize] {
                1 => {
                    let at = path.iter().position(|&x| x == s).unwrap_or(0);
                    let mut cycle = path[at..].to_vec();
                    cycle.push(s);
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(s, edges, mark, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        mark[r as usize] = 2;
        None
    }
    for r in 0..n as u32 {
        if mark[r as usize] == 0
            && let Some(cycle) = visit(r, &edges, &mut mark, &mut path)
        {
            let names: Vec<&str> = cycle
                .iter()
                .map(|&c| g.names[c as usize].as_str())
                .collect();
            let owner = names[0].split('/').next().unwrap_or(names[0]);
            let hint = if names
                .iter()
                .any(|n| n.contains("/star-") || n.contains("/opt-"))
            {
                " (a repeated part that can match the empty string)"
            } else {
                ""
            };
            return Err(Error::Grammar(format!(
                "left recursion in rule '{owner}'{hint}: {}; rewrite it right-recursively, \
                 e.g. `expr ::= term (\"+\" term)*` instead of `expr ::= expr \"+\" term | term`",
                names.join(" -> ")
            )));
        }
    }
    Ok(())
}
