//! Where KV caches live on the device: slots of shared buffers ("slabs"), so that one dispatch
//! can store or attend for several sequences.
//!
//! A sequence's cache of one attention layer is two sides (keys, values), each a slot of a
//! slab that holds that layer's side for up to [`Gpu::set_kv_sequences`] sequences. Bound
//! alone, a slot is a range of its slab (offsets aligned as bindings need), so the
//! one-sequence shaders read it from word 0; a batched decode step binds the whole slab once
//! and gives each sequence's first word in a table. Slabs are made at their full size (the
//! sequences an engine serves, like llama.cpp's `n_seq_max`: a slab cannot grow without
//! moving caches that steps in flight may be writing) and freed with their last slot; a
//! freed slot goes to the next sequence of that layer, cleared.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::kernels::{Bind, FxMap, SeqBinds};

/// One buffer of equal slots for one layer's key or value side.
pub(super) struct Slab {
    buf: wgpu::Buffer,
    /// Bytes of a slot (a multiple of the binding offset alignment).
    slot: u64,
    free: Mutex<Vec<u32>>,
    /// Bind groups binding this buffer (or a slot of it), dropped with it.
    binds: SeqBinds,
}

/// A sequence's slot of a slab: one side of one layer's cache.
pub(super) struct Side {
    slab: Arc<Slab>,
    index: u32,
    /// The cache side's own bytes (the slot may be larger).
    bytes: u64,
}

impl Side {
    pub(super) fn buf(&self) -> &wgpu::Buffer {
        &self.slab.buf
    }

    /// Byte offset of the slot in its slab.
    pub(super) fn off(&self) -> u64 {
        u64::from(self.index) * self.slab.slot
    }

    /// The slot's first u32 word in the slab (what a batched dispatch's table holds).
    pub(super) fn word0(&self) -> u32 {
        (self.off() / 4) as u32
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The slot, bound alone (word 0 is its first).
    pub(super) fn bind(&self) -> Bind<'_> {
        Bind::SeqRange(&self.slab.buf, self.off(), self.slab.slot, &self.slab.binds)
    }

    /// The whole slab, for a dispatch over several of its slots.
    pub(super) fn bind_slab(&self) -> Bind<'_> {
        Bind::Seq(&self.slab.buf, &self.slab.binds)
    }

    /// Whether `o` is a slot of the same slab.
    pub(super) fn shares_slab(&self, o: &Side) -> bool {
        Arc::ptr_eq(&self.slab, &o.slab)
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Ok(mut f) = self.slab.free.lock() {
            f.push(self.index);
        }
    }
}

/// Which caches share slabs: those of one attention layer (`None`: caches made outside a
/// sequence's layers, such as copies, get slabs of one slot), one side, one slot size.
type SlabKey = (Option<usize>, u8, u64);

/// The slabs of one device.
pub(super) struct KvPool {
    device: wgpu::Device,
    queue: wgpu::Queue,
    /// Slot offsets' alignment.
    align: u64,
    /// The largest slab a dispatch may bind whole.
    max_slab: u64,
    /// Slots of a new layer slab (at least one).
    per_slab: AtomicUsize,
    slabs: Mutex<FxMap<SlabKey, Vec<Weak<Slab>>>>,
}

impl KvPool {
    pub(super) fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> KvPool {
        let l = device.limits();
        KvPool {
            device: device.clone(),
            queue: queue.clone(),
            align: u64::from(l.min_storage_buffer_offset_alignment).max(256),
            max_slab: l.max_storage_buffer_binding_size.min(l.max_buffer_size),
            per_slab: AtomicUsize::new(1),
            slabs: Mutex::default(),
        }
    }

    pub(super) fn set_per_slab(&self, n: usize) {
        self.per_slab.store(n.max(1), Ordering::Relaxed);
    }

    pub(super) fn per_slab(&self) -> usize {
        self.per_slab.load(Ordering::Relaxed)
    }

    /// A slot of `bytes` for side `side` (0 keys, 1 values) of attention layer `layer`: a free
    /// one of that layer's slabs (cleared), else the first of a new slab.
    pub(super) fn take(&self, layer: Option<usize>, side: u8, bytes: u64) -> Side {
        self.take_with(layer, side, bytes, true)
    }

    /// [`KvPool::take`], or where `new_slab` is false and the layer's slabs have no free
    /// slot, a slab of one slot.
    fn take_with(&self, layer: Option<usize>, side: u8, bytes: u64, new_slab: bool) -> Side {
        let slot = bytes.max(4).next_multiple_of(self.align);
        let mut slabs = self.slabs.lock().expect("KV slabs");
        let list = slabs.entry((layer, side, slot)).or_default();
        list.retain(|w| w.strong_count() > 0);
        for slab in list.iter().filter_map(Weak::upgrade) {
            let index = slab.free.lock().expect("KV slots").pop();
            if let Some(index) = index {
                let s = Side { slab, index, bytes };
                // what the slot's last sequence left (a cache reads only what its own
                // sequence stored, but a slot starts as a new buffer would)
                let mut enc = self
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                enc.clear_buffer(s.buf(), s.off(), Some(slot));
                self.queue.submit([enc.finish()]);
                return s;
            }
        }
        if !new_slab && layer.is_some() {
            drop(slabs);
            return self.take_with(None, side, bytes, true);
        }
        let n = match layer {
            Some(_) => (self.per_slab() as u64).min(self.max_slab / slot).max(1),
            None => 1,
        };
        let slab = Arc::new(Slab {
            buf: self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("KV cache"),
                size: n * slot,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            slot,
            // (handed out from index 1 up; index 0 is this call's)
            free: Mutex::new((1..n as u32).rev().collect()),
            binds: SeqBinds::default(),
        });
        list.push(Arc::downgrade(&slab));
        Side {
            slab,
            index: 0,
            bytes,
        }
    }

    /// A copy of `src`, a side of layer `layer`'s cache: in a free slot of that layer's slabs
    /// (a forked session then steps with the others in one dispatch), else in a slab of one
    /// slot (a snapshot does not make a layer's slab of many).
    pub(super) fn copy(&self, src: &Side, layer: Option<usize>, side: u8) -> Side {
        let dst = self.take_with(layer, side, src.bytes, false);
        if src.bytes > 0 {
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            if dst.shares_slab(src) {
                // (a copy within one buffer is not allowed: through another)
                let tmp = self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: src.bytes,
                    usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                enc.copy_buffer_to_buffer(src.buf(), src.off(), &tmp, 0, src.bytes);
                enc.copy_buffer_to_buffer(&tmp, 0, dst.buf(), dst.off(), src.bytes);
            } else {
                enc.copy_buffer_to_buffer(src.buf(), src.off(), dst.buf(), dst.off(), src.bytes);
            }
            self.queue.submit([enc.finish()]);
        }
        dst
    }
}
