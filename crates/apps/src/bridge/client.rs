//! The evaluator's end of the bridge in Rust: `pointact eval bridge` runs our simulator's episodes
//! through a bridge server with it (the same protocol and server as SimplerEnv's runner), and
//! `pointact bench bridge` loads a server with many of them.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::protocol::{
    decode_metadata, decode_server, encode_client, ClientMessage, Metadata, ServerMessage,
};
use super::remote::{Action, EpisodeStart, Observation, RemoteError, RemotePolicy};
use super::wire::{self, MAX_FRAME_BYTES};

/// One connection to a bridge server: one episode.
pub struct BridgeClient {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// What the server sent on connect: its version and pointer backend.
    pub metadata: Metadata,
    /// Longest wait for any answer (the first observation's includes the pointer and planning).
    pub timeout: Duration,
    last_server_ms: Option<f64>,
    last_reply_bytes: usize,
}

/// `ws://HOST:PORT[/PATH]`, or `HOST:PORT` meaning `ws://HOST:PORT/`.
pub(crate) fn server_url(addr: &str) -> String {
    if addr.starts_with("ws://") || addr.starts_with("wss://") {
        addr.to_string()
    } else {
        format!("ws://{addr}/")
    }
}

impl BridgeClient {
    /// Connects and reads the server's metadata (refusing a server that is not pointact's, or
    /// speaks another protocol revision).
    pub async fn connect(addr: &str) -> Result<Self, RemoteError> {
        let url = server_url(addr);
        let link = |e: String| RemoteError::Link(format!("{url}: {e}"));
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_FRAME_BYTES))
            .max_frame_size(Some(MAX_FRAME_BYTES));
        let connect =
            tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), true);
        let (mut ws, _) = tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .map_err(|_| link("no answer within 10 s".into()))?
            .map_err(|e| link(e.to_string()))?;
        let first = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .map_err(|_| link("no metadata within 10 s".into()))?;
        let metadata = match first {
            Some(Ok(Message::Binary(b))) => {
                decode_metadata(&b).map_err(|e| RemoteError::Policy(format!("metadata: {e}")))?
            }
            Some(Ok(other)) => {
                return Err(RemoteError::Policy(format!(
                    "expected the metadata frame, got {other:?}"
                )))
            }
            Some(Err(e)) => return Err(link(e.to_string())),
            None => return Err(link("closed before the metadata".into())),
        };
        Ok(BridgeClient {
            ws,
            metadata,
            timeout: Duration::from_secs(600),
            last_server_ms: None,
            last_reply_bytes: 0,
        })
    }

    /// The server's time for the last action (frame in → answer out), as it reported it.
    pub fn last_server_ms(&self) -> Option<f64> {
        self.last_server_ms
    }

    /// The size of the last answer's frame (bytes).
    pub fn last_reply_bytes(&self) -> usize {
        self.last_reply_bytes
    }

    /// Sends one message and reads its answer; a text answer is the server's error.
    pub async fn request(&mut self, msg: &ClientMessage) -> Result<ServerMessage, RemoteError> {
        let frame = encode_client(msg).map_err(|e| RemoteError::Link(format!("encode: {e}")))?;
        self.request_encoded(frame, msg.kind()).await
    }

    /// [`BridgeClient::request`] for a message already encoded (`kind` names it in errors): the
    /// load bench encodes itself, to count the bytes and reuse the observation's buffers.
    pub async fn request_encoded(
        &mut self,
        frame: Vec<u8>,
        kind: &str,
    ) -> Result<ServerMessage, RemoteError> {
        self.send_raw(frame).await?;
        let answer = tokio::time::timeout(self.timeout, self.ws.next())
            .await
            .map_err(|_| {
                RemoteError::Link(format!(
                    "no answer to {kind:?} within {:.0} s",
                    self.timeout.as_secs_f64()
                ))
            })?;
        match answer {
            Some(Ok(Message::Binary(b))) => {
                self.last_reply_bytes = b.len();
                self.last_server_ms = wire::decode(&b)
                    .ok()
                    .and_then(|v| v.get("server_ms").and_then(|s| s.as_f64()));
                decode_server(&b).map_err(|e| RemoteError::Policy(e.to_string()))
            }
            Some(Ok(Message::Text(t))) => {
                self.last_reply_bytes = t.len();
                Err(RemoteError::Policy(t.to_string()))
            }
            Some(Ok(other)) => Err(RemoteError::Policy(format!("unexpected frame {other:?}"))),
            Some(Err(e)) => Err(RemoteError::Link(e.to_string())),
            None => Err(RemoteError::Link("the server closed the connection".into())),
        }
    }

    /// Sends bytes as one binary frame (tests and the load bench send broken ones on purpose).
    pub async fn send_raw(&mut self, frame: Vec<u8>) -> Result<(), RemoteError> {
        self.ws
            .send(Message::Binary(frame.into()))
            .await
            .map_err(|e| RemoteError::Link(e.to_string()))
    }

    /// Reads the next frame as text (the server's answer to a broken frame).
    pub async fn next_text(&mut self) -> Result<String, RemoteError> {
        match tokio::time::timeout(self.timeout, self.ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => Ok(t.to_string()),
            Ok(Some(Ok(other))) => {
                Err(RemoteError::Policy(format!("expected text, got {other:?}")))
            }
            Ok(Some(Err(e))) => Err(RemoteError::Link(e.to_string())),
            Ok(None) => Err(RemoteError::Link("closed".into())),
            Err(_) => Err(RemoteError::Link("no answer".into())),
        }
    }
}

fn unexpected(what: &str, got: &ServerMessage) -> RemoteError {
    RemoteError::Policy(format!("expected {what}, got {got:?}"))
}

impl RemotePolicy for BridgeClient {
    async fn reset(&mut self, start: &EpisodeStart) -> Result<(), RemoteError> {
        match self.request(&ClientMessage::Reset(start.clone())).await? {
            ServerMessage::Ready { episode_id, .. } if episode_id == start.episode_id => Ok(()),
            other => Err(unexpected("ready", &other)),
        }
    }

    async fn act(&mut self, observation: &Observation) -> Result<Action, RemoteError> {
        let msg = ClientMessage::Infer(Box::new(observation.clone()));
        match self.request(&msg).await? {
            ServerMessage::Action(a) => Ok(a),
            other => Err(unexpected("action", &other)),
        }
    }

    async fn end(&mut self, success: bool, steps: u64) -> Result<(), RemoteError> {
        match self
            .request(&ClientMessage::EpisodeEnd { success, steps })
            .await?
        {
            ServerMessage::Ended { .. } => Ok(()),
            other => Err(unexpected("ended", &other)),
        }
    }
}
