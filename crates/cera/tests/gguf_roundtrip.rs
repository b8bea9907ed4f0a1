//! GGUF writer → reader round trips: every value type, nested arrays, alignments, tensors.

use cera::gguf::{Array, GgufFile, GgufWriter, Value};
use cera::quant::GgmlType;

fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama")
        .set("t.u8", 200u8)
        .set("t.i8", -5i8)
        .set("t.u16", 60000u16)
        .set("t.i16", -30000i16)
        .set("t.u32", 4_000_000_000u32)
        .set("t.i32", -2_000_000_000i32)
        .set("t.f32", 1.5f32)
        .set("t.bool", true)
        .set("t.string", "héllo\nwörld")
        .set("t.u64", u64::MAX)
        .set("t.i64", i64::MIN)
        .set("t.f64", -0.125f64)
        .set(
            "t.arr_str",
            vec!["a".to_string(), String::new(), "ünï".to_string()],
        )
        .set("t.arr_f32", vec![0.5f32, -1.0, 3.25])
        .set("t.arr_i32", vec![1i32, -2, 3])
        .set("t.arr_bool", vec![true, false, true])
        .set("t.arr_empty", Vec::<u64>::new())
        .set(
            "t.nested",
            Value::Array(Array::Array(vec![
                Array::U8(vec![1, 2]),
                Array::String(vec!["x".into()]),
                Array::Array(vec![Array::F64(vec![2.5])]),
            ])),
        );
    w
}

#[test]
fn metadata_of_every_type_round_trips() {
    let w = sample_writer();
    let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.metadata.len(), 19);
    assert_eq!(g.get("t.u8"), Some(&Value::U8(200)));
    assert_eq!(g.get("t.i64"), Some(&Value::I64(i64::MIN)));
    assert_eq!(g.get_str("t.string").unwrap(), "héllo\nwörld");
    assert_eq!(g.get_u32("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(g.get_u64("t.u64").unwrap(), u64::MAX);
    assert!(g.get_bool("t.bool").unwrap());
    assert_eq!(g.get_f32("t.f32").unwrap(), 1.5);
    assert_eq!(g.get_str_array("t.arr_str").unwrap(), ["a", "", "ünï"]);
    assert_eq!(g.get_f32_array("t.arr_f32").unwrap(), [0.5, -1.0, 3.25]);
    assert_eq!(g.get_i64_array("t.arr_i32").unwrap(), [1, -2, 3]);
    assert_eq!(g.get_array("t.arr_empty").unwrap().len(), 0);
    let nested = g.get_array("t.nested").unwrap();
    assert_eq!(
        nested,
        &Array::Array(vec![
            Array::U8(vec![1, 2]),
            Array::String(vec!["x".into()]),
            Array::Array(vec![Array::F64(vec![2.5])]),
        ])
    );
    // keys keep file order
    let keys: Vec<&str> = g.metadata.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys[0], "general.architecture");
    assert_eq!(keys[18], "t.nested");
}

#[test]
fn accessor_errors_name_the_key() {
    let g = GgufFile::from_bytes(sample_writer().to_bytes().unwrap()).unwrap();
    let e = g.get_u32("t.missing").unwrap_err().to_string();
    assert!(e.contains("t.missing") && e.contains("missing"), "{e}");
    let e = g.get_u32("t.string").unwrap_err().to_string();
    assert!(
        e.contains("t.string") && e.contains("string") && e.contains("u32"),
        "{e}"
    );
    let e = g.get_u32("t.i32").unwrap_err().to_string(); // negative does not fit
    assert!(e.contains("t.i32"), "{e}");
    let e = g.get_str_array("t.arr_f32").unwrap_err().to_string();
    assert!(e.contains("t.arr_f32") && e.contains("array[f32]"), "{e}");
    // integers widen and narrow when the value fits
    assert_eq!(g.get_as::<u64>("t.u8").unwrap(), 200);
    assert_eq!(g.get_as::<i64>("t.i16").unwrap(), -30000);
}

#[test]
fn per_layer_values_accept_scalar_or_array() {
    let mut w = GgufWriter::new();
    w.set("a.kv", 4u32)
        .set("b.kv", vec![0u32, 8, 0, 8])
        .set("c.kv", vec![1u32, 2]);
    let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(g.get_per_layer_u32("a.kv", 3).unwrap(), [4, 4, 4]);
    assert_eq!(g.get_per_layer_u32("b.kv", 4).unwrap(), [0, 8, 0, 8]);
    let e = g.get_per_layer_u32("c.kv", 4).unwrap_err().to_string();
    assert!(e.contains("c.kv") && e.contains("4 layers"), "{e}");
}

#[test]
fn tensors_round_trip_at_any_alignment() {
    for alignment in [1u32, 8, 32, 64, 4096] {
        let mut w = GgufWriter::new();
        w.set("general.alignment", alignment);
        let f32s: Vec<f32> = (0..96).map(|i| i as f32 * 0.25 - 7.0).collect();
        w.add_tensor_f32("a", GgmlType::F32, &[32, 3], &f32s)
            .unwrap();
        w.add_tensor_f32("b", GgmlType::F16, &[96], &f32s).unwrap();
        w.add_tensor_raw("c", GgmlType::I8, &[5], vec![1, 2, 3, 4, 5])
            .unwrap();
        w.add_tensor_f32("d", GgmlType::BF16, &[8, 4, 3], &f32s)
            .unwrap();
        let bytes = w.to_bytes().unwrap();
        let g = GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(g.alignment, alignment as u64);
        assert_eq!(g.tensors.len(), 4);
        for t in &g.tensors {
            assert_eq!(t.offset % alignment as u64, 0, "{} misaligned", t.name);
        }
        assert_eq!(g.tensor("a").unwrap().shape, [32, 3]);
        assert_eq!(g.tensor_f32("a").unwrap(), f32s);
        assert_eq!(g.tensor_f32("b").unwrap(), f32s); // all exactly representable in f16
        assert_eq!(g.tensor_f32("d").unwrap(), f32s);
        assert_eq!(g.tensor_data(g.tensor("c").unwrap()), [1, 2, 3, 4, 5]);
        assert_eq!(g.tensor("d").unwrap().shape, [8, 4, 3]);
    }
}

#[test]
fn file_and_buffer_read_the_same() {
    let mut w = sample_writer();
    w.add_tensor_f32("w", GgmlType::F32, &[4], &[1.0, 2.0, 3.0, 4.0])
        .unwrap();
    let dir = std::env::temp_dir().join(format!("cera-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.gguf");
    w.write_file(&path).unwrap();
    let a = GgufFile::open(&path).unwrap();
    let b = GgufFile::from_bytes(std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(a.metadata, b.metadata);
    assert_eq!(a.bytes(), b.bytes());
    assert_eq!(a.tensor_f32("w").unwrap(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(a.path(), Some(path.as_path()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writer_rejects_bad_tensors() {
    let mut w = GgufWriter::new();
    let e = w
        .add_tensor_raw("q", GgmlType::Q8_0, &[16], vec![0; 17])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("'q'") && e.contains("Q8_0"), "{e}");
    let e = w
        .add_tensor_raw("f", GgmlType::F32, &[2], vec![0; 7])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("7 bytes"), "{e}");
    w.add_tensor_raw("f", GgmlType::F32, &[2], vec![0; 8])
        .unwrap();
    let e = w
        .add_tensor_raw("f", GgmlType::F32, &[2], vec![0; 8])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("duplicate"), "{e}");
}
