use cera::engine::{Engine, EngineOptions};
fn main() {
    let entry = cera::fetch::lookup("smollm2").unwrap();
    let path = cera::fetch::ensure(entry, &mut |_| {}).unwrap();
    let engine = Engine::load(&path, EngineOptions::default()).unwrap();
    let tok = engine.tokenizer();
    for t in [17932u32, 1799, 216, 171, 219] {
        println!(
            "{t}: {:?} ctrl={} attr={}",
            tok.token_bytes(t),
            tok.is_control(t),
            tok.token_attr(t)
        );
    }
    let schema: serde_json::Value = serde_json::from_str(
        r#"{"type":"object","properties":{"member":{"type":"boolean"}},"required":["member"]}"#,
    )
    .unwrap();
    let c = cera::grammar::json_schema::compile(&schema).unwrap();
    println!("{}", c.gbnf);
    let g = c.grammar;
    let st = g
        .initial_state()
        .advance_bytes(&g, b"{\"member\": ")
        .unwrap();
    println!("{:?}", st);
    let mut bytes = Vec::new();
    for t in [171u32, 219] {
        bytes.extend_from_slice(tok.token_bytes(t));
        println!("after {:?}: {:?}", bytes, st.advance_bytes(&g, &bytes));
    }
}
