//! Chat messages and tool calls, serialized in the shape chat templates expect (the OpenAI /
//! Hugging Face shape).

use serde::{Deserialize, Serialize};

use crate::tools::ToolCall;

/// One message of a conversation.
///
/// Serialized for templates as `{"role", "content"?, "tool_calls"?, "tool_call_id"?, "name"?}`:
/// fields that are `None` or empty are left out, as Hugging Face's examples leave them out (an
/// assistant message that only calls tools has no `content` key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, or whatever else the template understands.
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `tool` messages: the id of the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `tool` messages: the name of the tool that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    /// A message with a role and text content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    pub fn system(content: impl Into<String>) -> Message {
        Message::new("system", content)
    }

    pub fn user(content: impl Into<String>) -> Message {
        Message::new("user", content)
    }

    pub fn assistant(content: impl Into<String>) -> Message {
        Message::new("assistant", content)
    }

    /// An assistant message that calls tools and says nothing else (no `content`).
    pub fn tool_calls(calls: Vec<ToolCall>) -> Message {
        Message {
            role: "assistant".into(),
            content: None,
            tool_calls: calls,
            tool_call_id: None,
            name: None,
        }
    }

    /// A tool's answer to the call `tool_call_id`.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Message {
        Message {
            role: "tool".into(),
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(tool_call_id.into()),
            name: Some(name.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serializes_in_template_shape() {
        let msgs = vec![
            Message::user("hi"),
            Message::tool_calls(vec![ToolCall::new(
                Some("call1".into()),
                "get_weather",
                json!({"location": "Paris", "days": 2}),
            )]),
            Message::tool_result("call1", "get_weather", "sunny"),
        ];
        let v = serde_json::to_value(&msgs).unwrap();
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"type":"function","id":"call1","function":{"name":"get_weather","arguments":{"location":"Paris","days":2}}}]},{"role":"tool","content":"sunny","tool_call_id":"call1","name":"get_weather"}]"#
        );
        let back: Vec<Message> = serde_json::from_value(v).unwrap();
        assert_eq!(back, msgs);
    }

    #[test]
    fn string_arguments_are_parsed() {
        let call: ToolCall = serde_json::from_value(json!({
            "id": "x", "type": "function",
            "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [true]}"}
        }))
        .unwrap();
        assert_eq!(
            serde_json::to_string(&call.arguments).unwrap(),
            r#"{"b":1,"a":[true]}"#
        );
        let call: ToolCall =
            serde_json::from_value(json!({"name": "f", "arguments": "not json"})).unwrap();
        assert_eq!(call.arguments, json!("not json"));
        assert_eq!(call.id, None);
    }
}
