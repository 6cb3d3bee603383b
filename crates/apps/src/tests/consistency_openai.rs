//! The consistency reward's reference model behind an OpenAI-compatible server
//! (`OpenAiReference`, through `OpenAiPointer::chat_text`): the request is the released client's
//! (text-only system + user messages, temperature 0.1, max_tokens 10), the reply's content comes
//! back as sent, and a failing server makes the reward read the think text instead.

use std::time::Duration;

use super::common::openai_mock::{completion, Mock, Reply};
use pointact::pointing::openai::{OpenAiConfig, OpenAiPointer};
use pointact::train::consistency::{
    consistency, reference_prompt, OpenAiReference, ReferenceModel, REFERENCE_SYSTEM,
};

fn reference(base: &str) -> OpenAiReference {
    OpenAiReference::new(
        OpenAiPointer::new(OpenAiConfig {
            api_key: None,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            backoff_base: Duration::from_millis(1),
            retries: 1,
            ..OpenAiConfig::new(base, "qwen2.5-vl-3b-instruct")
        })
        .expect("valid endpoint"),
    )
}

const COMPLETION: &str = "<think>The chair is left of the desk, so B.</think>\n<answer>B</answer>";
const QUESTION: &str = "A room.\nQuestion: Where is the chair? A. right B. left C. on D. under";

#[test]
fn the_request_is_the_released_one_and_the_reply_decides() {
    let mock = Mock::start(vec![
        Reply::Http(200, completion(" b ")),
        Reply::Http(200, completion("C")),
    ]);
    let mut r = reference(&mock.base);
    assert_eq!(
        consistency(COMPLETION, Some("B"), Some(QUESTION), &mut r),
        1.0
    );
    assert_eq!(
        consistency(COMPLETION, Some("B"), Some(QUESTION), &mut r),
        0.0
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0]
        .request_line
        .starts_with("POST /v1/chat/completions"));
    let body = requests[0].json();
    assert_eq!(
        body,
        serde_json::json!({
            "model": "qwen2.5-vl-3b-instruct",
            "messages": [
                {"role": "system", "content": REFERENCE_SYSTEM},
                // "Question:" + the stripped rest: no space after the colon (released).
                {"role": "user", "content": reference_prompt(
                    "Question:Where is the chair? A. right B. left C. on D. under",
                    "The chair is left of the desk, so B.")},
            ],
            "temperature": 0.1,
            "max_tokens": 10,
        })
    );
}

#[test]
fn a_failing_server_falls_back_to_the_think_text() {
    // 400 is not retried; 503 twice exhausts the one retry.
    let mock = Mock::start(vec![
        Reply::Http(400, "{\"error\": {\"message\": \"bad\"}}".into()),
        Reply::Http(503, "busy".into()),
        Reply::Http(503, "busy".into()),
        Reply::Http(200, "{\"choices\": []}".into()),
    ]);
    let mut r = reference(&mock.base);
    // The think text ends in "so B." → B, which equals the answer.
    for _ in 0..3 {
        assert_eq!(
            consistency(COMPLETION, Some("B"), Some(QUESTION), &mut r),
            1.0
        );
    }
    assert_eq!(mock.requests().len(), 4);
    let err = r.reply("s", "u", 10, 0.1).unwrap_err().to_string();
    assert!(err.contains("reference server"), "{err}");
}
