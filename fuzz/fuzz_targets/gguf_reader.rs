//! Feeds arbitrary bytes to the GGUF reader and exercises everything it hands back: metadata
//! accessors, tensor data, and dequantization of each tensor (bounded in size).
#![no_main]

use cera::gguf::GgufFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    for (k, v) in &g.metadata {
        let _ = v.to_string();
        let _ = g.get_u32(k);
        let _ = g.get_str(k);
        let _ = g.get_f32_array(k);
        let _ = g.get_per_layer_u32(k, 4);
    }
    for t in &g.tensors {
        let bytes = g.tensor_data(t);
        assert_eq!(bytes.len() as u64, t.size);
        if t.n_elements() <= 1 << 16 {
            let _ = g.tensor_f32(&t.name);
        }
    }
});
