//! A radix tree over token blocks: each node is one block of [`BLOCK`] tokens after its
//! parent's, and lists the entries whose tokens start with the node's whole path. A lookup
//! walks the query's blocks as deep as they match, then measures the exact common prefix
//! against the few entries listed there (they already share every block above).

use std::collections::HashMap;

/// Tokens per block of the tree.
pub(crate) const BLOCK: usize = 32;

#[derive(Default)]
struct Node {
    children: HashMap<Box<[u32]>, usize>,
    /// Entries whose tokens pass through this node.
    entries: Vec<u64>,
}

pub(crate) struct Tree {
    nodes: Vec<Node>,
    free: Vec<usize>,
}

impl Default for Tree {
    fn default() -> Self {
        Tree {
            nodes: vec![Node::default()],
            free: Vec::new(),
        }
    }
}

impl Tree {
    fn alloc(&mut self) -> usize {
        match self.free.pop() {
            Some(i) => i,
            None => {
                self.nodes.push(Node::default());
                self.nodes.len() - 1
            }
        }
    }

    pub fn insert(&mut self, id: u64, tokens: &[u32]) {
        let mut at = 0;
        self.nodes[0].entries.push(id);
        for block in tokens.chunks_exact(BLOCK) {
            at = match self.nodes[at].children.get(block) {
                Some(&c) => c,
                None => {
                    let c = self.alloc();
                    self.nodes[at].children.insert(block.into(), c);
                    c
                }
            };
            self.nodes[at].entries.push(id);
        }
    }

    pub fn remove(&mut self, id: u64, tokens: &[u32]) {
        let mut path = vec![0usize];
        let mut at = 0;
        for block in tokens.chunks_exact(BLOCK) {
            match self.nodes[at].children.get(block) {
                Some(&c) => {
                    at = c;
                    path.push(c);
                }
                None => break,
            }
        }
        for &n in &path {
            self.nodes[n].entries.retain(|&e| e != id);
        }
        // prune the nodes no entry passes through any more, deepest first
        for (d, block) in tokens
            .chunks_exact(BLOCK)
            .enumerate()
            .take(path.len() - 1)
            .rev()
        {
            let n = path[d + 1];
            if self.nodes[n].entries.is_empty() {
                self.nodes[path[d]].children.remove(block);
                self.nodes[n] = Node::default();
                self.free.push(n);
            }
        }
    }

    /// The entries sharing the most whole blocks with `query`, deepest node first, then each
    /// shallower node's (for callers that cannot use the deepest ones), and the number of
    /// tokens those share for certain.
    pub fn candidates(&self, query: &[u32]) -> Vec<(usize, &[u64])> {
        let mut path = vec![(0usize, 0usize)];
        let mut at = 0;
        for (d, block) in query.chunks_exact(BLOCK).enumerate() {
            match self.nodes[at].children.get(block) {
                Some(&c) => {
                    at = c;
                    path.push(((d + 1) * BLOCK, c));
                }
                None => break,
            }
        }
        path.iter()
            .rev()
            .map(|&(shared, n)| (shared, self.nodes[n].entries.as_slice()))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes[0].entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_deepest_and_prunes() {
        let mut t = Tree::default();
        let a: Vec<u32> = (0..100).collect();
        let mut b = a.clone();
        b[70] = 999;
        let c: Vec<u32> = (500..540).collect();
        t.insert(1, &a);
        t.insert(2, &b);
        t.insert(3, &c);
        let q: Vec<u32> = (0..90).collect();
        let cands = t.candidates(&q);
        // blocks 0..64 shared by a and b; block 64..96 of the query is 64..90 only: partial
        assert_eq!(cands[0].0, 64);
        assert_eq!(cands[0].1, &[1, 2]);
        assert_eq!(cands.last().unwrap().1.len(), 3);
        t.remove(1, &a);
        t.remove(2, &b);
        assert_eq!(t.candidates(&q)[0].0, 0);
        t.remove(3, &c);
        assert!(t.is_empty());
        assert_eq!(
            t.nodes.len() - t.free.len(),
            1,
            "every node but the root was pruned"
        );
    }
}
