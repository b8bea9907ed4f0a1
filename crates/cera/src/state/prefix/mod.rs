//! The prefix cache: snapshots of sequence state keyed by their tokens, so a new prompt that
//! starts like an earlier one restores the longest usable prefix and prefills only the rest
//! ([`crate::session::Session::prefill_cached`]).
//!
//! * Entries are namespaced by the model's [`Fingerprint`] and the KV cache types: a cache
//!   shared by several models never mixes them.
//! * Lookup is a radix tree over blocks of 32 tokens ([`tree`]); the exact common prefix is
//!   then measured against the entries found. For an attention-only model any prefix of an
//!   entry is usable (its first `n` cached positions are that prefix's state); a model with
//!   recurrent state (LFM2) can only resume where the entry holds a convolution snapshot (the
//!   end of each prefill chunk and recent decode steps), and sliding-window layers need
//!   nothing special (their caches hold every position).
//! * In memory under a byte budget, least recently used first out; optionally on disk too
//!   ([`disk`]), under a size cap, written atomically with a checksum per entry: a corrupt or
//!   foreign file is skipped with a warning ([`PrefixCache::take_warnings`]), never loaded.
//! * An entry whose tokens are a prefix of a new one (and whose state the new one can give)
//!   is replaced by it, so a growing conversation keeps one entry, not one per turn.

mod disk;
mod tree;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::Fingerprint;

/// Which model and cache types an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Namespace {
    pub fingerprint: Fingerprint,
    /// KV cache type ids of keys and values (the rotation in the key byte's top bit).
    pub kv_types: (u8, u8),
}

impl Namespace {
    pub(crate) fn new(fp: Fingerprint, kv: crate::backend::KvSpec) -> Self {
        Namespace {
            fingerprint: fp,
            kv_types: disk::kv_ids(kv),
        }
    }
}

#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PrefixCacheOptions {
    /// Bytes of state kept in memory (default 1 GiB).
    pub mem_bytes: usize,
    /// Also keep entries in this directory (they survive the process).
    pub disk_dir: Option<PathBuf>,
    /// Bytes the directory may hold (default 8 GiB).
    pub disk_bytes: u64,
    /// Prompts shorter than this are not stored (default 32 tokens).
    pub min_tokens: usize,
}

impl Default for PrefixCacheOptions {
    fn default() -> Self {
        PrefixCacheOptions {
            mem_bytes: 1 << 30,
            disk_dir: None,
            disk_bytes: 8 << 30,
            min_tokens: 32,
        }
    }
}

impl PrefixCacheOptions {
    pub fn in_memory(mem_bytes: usize) -> Self {
        PrefixCacheOptions {
            mem_bytes,
            ..Default::default()
        }
    }

    pub fn with_disk(mut self, dir: impl Into<PathBuf>, bytes: u64) -> Self {
        self.disk_dir = Some(dir.into());
        self.disk_bytes = bytes;
        self
    }
}

/// Counters of a prefix cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrefixStats {
    pub lookups: u64,
    pub hits: u64,
    /// Tokens restored instead of prefilled, over all hits.
    pub tokens_reused: u64,
    pub inserts: u64,
    /// Entries dropped from memory for the byte budget (they may remain on disk).
    pub evictions: u64,
    /// Hits served from the disk tier.
    pub disk_loads: u64,
    pub mem_entries: usize,
    pub mem_bytes: usize,
    pub disk_entries: usize,
    pub disk_bytes: u64,
}

struct Entry {
    ns: Namespace,
    tokens: Vec<u32>,
    /// Positions with a convolution snapshot (recurrent models; empty otherwise).
    conv_pos: Vec<usize>,
    recurrent: bool,
    /// The state (see `Body`), when in memory.
    body: Option<Arc<Vec<u8>>>,
    /// The file, when on disk, and its size.
    disk: Option<(PathBuf, u64)>,
    last_used: u64,
}

impl Entry {
    /// Tokens of `query` this entry can restore, given the common prefix `lcp` and the
    /// session's context `n_ctx` (at least one token is always left to prefill, for logits).
    fn usable(&self, lcp: usize, query_len: usize, n_ctx: usize) -> usize {
        if self.tokens.len() > n_ctx {
            return 0;
        }
        let cap = lcp.min(query_len.saturating_sub(1)).min(self.tokens.len());
        if self.recurrent {
            self.conv_pos
                .iter()
                .copied()
                .filter(|&p| p <= cap)
                .max()
                .unwrap_or(0)
        } else {
            cap
        }
    }
}

/// A hit: restore `body` (state of `n_saved` positions) and keep `n` tokens of it.
pub(crate) struct Hit {
    pub n: usize,
    pub n_saved: usize,
    pub body: Arc<Vec<u8>>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<u64, Entry>,
    trees: HashMap<Namespace, tree::Tree>,
    next_id: u64,
    clock: u64,
    stats: PrefixStats,
    warnings: Vec<String>,
}

/// See the module docs. Shared between sessions (and threads) by reference or `Arc`.
pub struct PrefixCache {
    opts: PrefixCacheOptions,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrefixCache({:?})", self.stats())
    }
}

fn lcp(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    /// A cache; with a disk directory, it is created if needed and its entries indexed.
    pub fn new(opts: PrefixCacheOptions) -> crate::Result<PrefixCache> {
        let mut inner = Inner::default();
        if let Some(dir) = &opts.disk_dir {
            std::fs::create_dir_all(dir).map_err(|e| crate::Error::io(dir, e))?;
            let (mut found, warnings) = disk::scan(dir);
            inner.warnings = warnings;
            // oldest first, so recency follows the files' ages
            found.sort_by_key(|e| e.mtime);
            for d in found {
                let id = inner.next_id;
                inner.next_id += 1;
                inner.clock += 1;
                inner.stats.disk_entries += 1;
                inner.stats.disk_bytes += d.size;
                let tree = inner.trees.entry(d.ns).or_default();
                tree.insert(id, &d.tokens);
                inner.entries.insert(
                    id,
                    Entry {
                        ns: d.ns,
                        recurrent: !d.conv_pos.is_empty(),
                        tokens: d.tokens,
                        conv_pos: d.conv_pos,
                        body: None,
                        disk: Some((d.path, d.size)),
                        last_used: inner.clock,
                    },
                );
            }
        }
        let c = PrefixCache {
            opts,
            inner: Mutex::new(inner),
        };
        c.lock().enforce_disk(c.opts.disk_bytes);
        Ok(c)
    }

    /// An in-memory cache of `mem_bytes`.
    pub fn in_memory(mem_bytes: usize) -> PrefixCache {
        PrefixCache::new(PrefixCacheOptions::in_memory(mem_bytes)).expect("no disk to open")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn options(&self) -> &PrefixCacheOptions {
        &self.opts
    }

    pub fn stats(&self) -> PrefixStats {
        self.lock().stats.clone()
    }

    /// Warnings since the last call (skipped disk entries, failed writes).
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().warnings)
    }

    /// Forgets every entry in memory (the disk tier stays).
    pub fn clear_memory(&self) {
        let mut g = self.lock();
        let ids: Vec<u64> = g.entries.keys().copied().collect();
        for id in ids {
            g.drop_from_memory(id);
        }
    }

    /// The longest usable prefix of `query` for a session of namespace `ns` and context
    /// `n_ctx`; loads it from disk when only there.
    pub(crate) fn lookup(&self, ns: Namespace, query: &[u32], n_ctx: usize) -> Option<Hit> {
        let mut g = self.lock();
        g.stats.lookups += 1;
        loop {
            let best = g.best(ns, query, n_ctx)?;
            let (id, n) = best;
            g.clock += 1;
            let clock = g.clock;
            let e = g.entries.get_mut(&id)?;
            e.last_used = clock;
            let n_saved = e.tokens.len();
            if let Some(body) = &e.body {
                let body = Arc::clone(body);
                g.stats.hits += 1;
                g.stats.tokens_reused += n as u64;
                return Some(Hit { n, n_saved, body });
            }
            let (path, size) = e.disk.clone()?;
            let d = disk::DiskEntry {
                ns,
                tokens: e.tokens.clone(),
                conv_pos: e.conv_pos.clone(),
                path: path.clone(),
                size,
                mtime: std::time::UNIX_EPOCH,
            };
            match disk::read_body(&d) {
                Ok(body) => {
                    let body = Arc::new(body);
                    g.stats.hits += 1;
                    g.stats.disk_loads += 1;
                    g.stats.tokens_reused += n as u64;
                    g.put_in_memory(id, Arc::clone(&body), self.opts.mem_bytes);
                    return Some(Hit { n, n_saved, body });
                }
                Err(why) => {
                    g.warnings
                        .push(format!("prefix cache: skipping {}: {why}", path.display()));
                    let _ = std::fs::remove_file(&path);
                    g.remove(id);
                }
            }
        }
    }

    /// Stores the state of `tokens` (`body`; convolution snapshots at `conv_pos`).
    pub(crate) fn insert(
        &self,
        ns: Namespace,
        tokens: &[u32],
        recurrent: bool,
        conv_pos: Vec<usize>,
        body: Vec<u8>,
    ) {
        if tokens.len() < self.opts.min_tokens.max(1) {
            return;
        }
        let mut g = self.lock();
        // an existing entry that already gives this state: just touch it
        let covered = g.matching(ns, tokens).into_iter().find(|&(id, l)| {
            let e = &g.entries[&id];
            l == tokens.len() && (!e.recurrent || e.conv_pos.contains(&tokens.len()))
        });
        if let Some((id, _)) = covered {
            g.clock += 1;
            let c = g.clock;
            if let Some(e) = g.entries.get_mut(&id) {
                e.last_used = c;
            }
            return;
        }
        // entries this one supersedes: prefixes of it whose state it can give
        let superseded: Vec<u64> = g
            .matching(ns, tokens)
            .into_iter()
            .filter(|&(id, l)| {
                let e = &g.entries[&id];
                l == e.tokens.len() && (!recurrent || conv_pos.contains(&e.tokens.len()))
            })
            .map(|(id, _)| id)
            .collect();
        for id in superseded {
            if let Some((p, _)) = g.entries.get(&id).and_then(|e| e.disk.clone()) {
                let _ = std::fs::remove_file(p);
            }
            g.remove(id);
        }
        let disk = self.opts.disk_dir.as_ref().and_then(|dir| {
            match disk::write(dir, &ns, tokens, &conv_pos, &body) {
                Ok(d) => Some(d),
                Err(e) => {
                    g.warnings
                        .push(format!("prefix cache: could not write an entry: {e}"));
                    None
                }
            }
        });
        let id = g.next_id;
        g.next_id += 1;
        g.clock += 1;
        g.stats.inserts += 1;
        if let Some((_, size)) = &disk {
            g.stats.disk_entries += 1;
            g.stats.disk_bytes += size;
        }
        g.trees.entry(ns).or_default().insert(id, tokens);
        let last_used = g.clock;
        g.entries.insert(
            id,
            Entry {
                ns,
                tokens: tokens.to_vec(),
                conv_pos,
                recurrent,
                body: None,
                disk,
                last_used,
            },
        );
        g.put_in_memory(id, Arc::new(body), self.opts.mem_bytes);
        if g.entries
            .get(&id)
            .is_some_and(|e| e.body.is_none() && e.disk.is_none())
        {
            g.remove(id);
        }
        g.enforce_disk(self.opts.disk_bytes);
    }
}

impl Inner {
    /// Entries of `ns` sharing a prefix with `tokens`: (id, common prefix length), best first.
    fn matching(&self, ns: Namespace, tokens: &[u32]) -> Vec<(u64, usize)> {
        let Some(t) = self.trees.get(&ns) else {
            return Vec::new();
        };
        let mut out: Vec<(u64, usize)> = Vec::new();
        for (_, ids) in t.candidates(tokens) {
            for &id in ids {
                if out.iter().any(|&(i, _)| i == id) {
                    continue;
                }
                if let Some(e) = self.entries.get(&id) {
                    out.push((id, lcp(&e.tokens, tokens)));
                }
            }
        }
        out.sort_by_key(|&(_, l)| std::cmp::Reverse(l));
        out
    }

    /// The entry giving the most usable tokens (ties: the most recently used).
    fn best(&self, ns: Namespace, query: &[u32], n_ctx: usize) -> Option<(u64, usize)> {
        let t = self.trees.get(&ns)?;
        for (_, ids) in t.candidates(query) {
            let best = ids
                .iter()
                .filter_map(|id| self.entries.get(id).map(|e| (*id, e)))
                .map(|(id, e)| (id, e.usable(lcp(&e.tokens, query), query.len(), n_ctx), e))
                .filter(|&(_, u, _)| u > 0)
                .max_by_key(|&(_, u, e)| (u, e.last_used));
            if let Some((id, u, _)) = best {
                return Some((id, u));
            }
        }
        None
    }

    fn mem_bytes(&self) -> usize {
        self.stats.mem_bytes
    }

    fn put_in_memory(&mut self, id: u64, body: Arc<Vec<u8>>, budget: usize) {
        let size = body.len();
        if size > budget {
            return;
        }
        while self.mem_bytes() + size > budget {
            let victim = self
                .entries
                .iter()
                .filter(|(_, e)| e.body.is_some())
                .min_by_key(|(_, e)| e.last_used)
                .map(|(&i, _)| i);
            match victim {
                Some(v) => {
                    self.stats.evictions += 1;
                    self.drop_from_memory(v);
                }
                None => break,
            }
        }
        if let Some(e) = self.entries.get_mut(&id)
            && e.body.is_none()
        {
            e.body = Some(body);
            self.stats.mem_entries += 1;
            self.stats.mem_bytes += size;
        }
    }

    /// Drops an entry's state from memory; an entry not on disk goes entirely.
    fn drop_from_memory(&mut self, id: u64) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        if let Some(b) = e.body.take() {
            self.stats.mem_entries -= 1;
            self.stats.mem_bytes -= b.len();
        }
        if e.disk.is_none() {
            self.remove(id);
        }
    }

    fn remove(&mut self, id: u64) {
        let Some(e) = self.entries.remove(&id) else {
            return;
        };
        if let Some(b) = &e.body {
            self.stats.mem_entries -= 1;
            self.stats.mem_bytes -= b.len();
        }
        if let Some((_, size)) = &e.disk {
            self.stats.disk_entries -= 1;
            self.stats.disk_bytes -= size;
        }
        if let Some(t) = self.trees.get_mut(&e.ns) {
            t.remove(id, &e.tokens);
            if t.is_empty() {
                self.trees.remove(&e.ns);
            }
        }
    }

    /// Deletes the least recently used files until the directory fits `cap`.
    fn enforce_disk(&mut self, cap: u64) {
        while self.stats.disk_bytes > cap {
            let victim = self
                .entries
                .iter()
                .filter(|(_, e)| e.disk.is_some())
                .min_by_key(|(_, e)| e.last_used)
                .map(|(&i, _)| i);
            let Some(v) = victim else { break };
            let e = self.entries.get_mut(&v).expect("victim exists");
            let (path, size) = e.disk.take().expect("on disk");
            let _ = std::fs::remove_file(&path);
            self.stats.disk_entries -= 1;
            self.stats.disk_bytes -= size;
            if e.body.is_none() {
                self.remove(v);
            }
        }
    }
}
