//! Chat messages and tool calls, serialized in the shape chat templates expect (the OpenAI /
//! Hugging Face shape).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value as Json};

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

/// A call of a function tool by the assistant.
///
/// Serialized as `{"type": "function", "id": .., "function": {"name": .., "arguments": ..}}`
/// (`id` left out when `None`). `arguments` is passed to the template as it is; Hugging Face
/// templates expect an object. When deserializing, arguments given as a string holding a JSON
/// object (the OpenAI wire format) are parsed into that object.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: Option<String>,
    pub name: String,
    pub arguments: Json,
}

impl ToolCall {
    pub fn new(id: Option<String>, name: impl Into<String>, arguments: Json) -> ToolCall {
        ToolCall {
            id,
            name: name.into(),
            arguments,
        }
    }

    /// The OpenAI-shaped JSON object templates see.
    pub fn to_json(&self) -> Json {
        let mut function = Map::new();
        function.insert("name".into(), Json::String(self.name.clone()));
        function.insert("arguments".into(), self.arguments.clone());
        let mut call = Map::new();
        call.insert("type".into(), Json::String("function".into()));
        if let Some(id) = &self.id {
            call.insert("id".into(), Json::String(id.clone()));
        }
        call.insert("function".into(), Json::Object(function));
        Json::Object(call)
    }
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let v = Json::deserialize(deserializer)?;
        let obj = v
            .as_object()
            .ok_or_else(|| D::Error::custom("tool call must be an object"))?;
        // Accept both the OpenAI shape and a flat {"name", "arguments"} object.
        let func = match obj.get("function") {
            Some(Json::Object(f)) => f,
            Some(_) => return Err(D::Error::custom("tool call 'function' must be an object")),
            None => obj,
        };
        let name = func
            .get("name")
            .and_then(Json::as_str)
            .ok_or_else(|| D::Error::custom("tool call has no function name"))?
            .to_owned();
        let arguments = match func.get("arguments") {
            None | Some(Json::Null) => Json::Object(Map::new()),
            Some(Json::String(s)) => match serde_json::from_str::<Json>(s) {
                Ok(parsed @ Json::Object(_)) => parsed,
                _ => Json::String(s.clone()),
            },
            Some(other) => other.clone(),
        };
        let id = match obj.get("id") {
            None | Some(Json::Null) => None,
            Some(Json::String(s)) => Some(s.clone()),
            Some(_) => return Err(D::Error::custom("tool call 'id' must be a string")),
        };
        Ok(ToolCall {
            id,
            name,
            arguments,
        })
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
