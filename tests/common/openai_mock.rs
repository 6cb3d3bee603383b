//! A bare OpenAI-compatible HTTP/1.1 responder on 127.0.0.1:0 for tests of the `openai` pointer
//! (`pointing_openai`, the CLI's robot runs): each connection gets the next canned reply in order
//! (or is held open without one), and every request is recorded for inspection.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::Value;

/// What the mock does with one connection.
#[derive(Clone)]
pub enum Reply {
    /// Answer with this status and body.
    Http(u16, String),
    /// Read the request, then say nothing and keep the connection open.
    Hang,
    /// Send a 200 head announcing a long body, then one byte every 100 ms, never finishing (until
    /// the client hangs up).
    Trickle,
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub request_line: String,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

pub struct Mock {
    /// `http://127.0.0.1:PORT/v1`, what `--endpoint` / `OpenAiConfig` take.
    pub base: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Mock {
    pub fn start(replies: Vec<Reply>) -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let queue = Arc::new(Mutex::new(VecDeque::from(replies)));
        let recorded = Arc::clone(&requests);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let reply = queue.lock().unwrap().pop_front().unwrap_or_else(|| {
                    Reply::Http(500, "mock: no canned reply left for this request".into())
                });
                let recorded = Arc::clone(&recorded);
                thread::spawn(move || serve(stream, reply, &recorded));
            }
        });
        Mock { base, requests }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, reply: Reply, recorded: &Mutex<Vec<Recorded>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    recorded.lock().unwrap().push(Recorded {
        request_line: request_line.trim_end().to_owned(),
        headers,
        body,
    });
    match reply {
        Reply::Http(status, body) => {
            let mut stream = stream;
            let head = format!(
                "HTTP/1.1 {status} Mock\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
        Reply::Hang => {
            // Long past any client timeout in these tests; the thread is detached.
            thread::sleep(Duration::from_secs(30));
            drop(stream);
        }
        Reply::Trickle => {
            let mut stream = stream;
            let head = "HTTP/1.1 200 Mock\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n";
            let _ = stream.write_all(head.as_bytes());
            while stream.write_all(b" ").is_ok() {
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// A chat-completion body whose message content is `content`.
pub fn completion(content: &str) -> String {
    serde_json::json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "model": "embodied-r1",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop",
        }],
        "usage": {"prompt_tokens": 500, "completion_tokens": 40, "total_tokens": 540},
    })
    .to_string()
}
