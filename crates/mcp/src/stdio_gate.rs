//! The stdio bridge's input read line by line before rmcp: a `tools/call`
//! repeating an argument key is answered here (rmcp would keep the last
//! value); every other line goes on to rmcp's own line transport unchanged.

use crate::repeated_keys;
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{AsyncRwTransport, DEFAULT_MAX_LINE_LENGTH};
use std::future::Future;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Bytes between the gate and rmcp's reader.
const PIPE_BYTES: usize = 64 * 1024;
/// Refusals waiting to be written.
const REFUSALS: usize = 16;

/// rmcp's line transport on `output`, fed the lines of `input` that pass
/// the gate; refusals are written to `output` as rmcp's answers are.
pub(crate) struct GatedLines<W: AsyncWrite> {
    rmcp: AsyncRwTransport<RoleServer, tokio::io::DuplexStream, W>,
    refusals: mpsc::Receiver<ServerJsonRpcMessage>,
}

/// The transport of the stdio bridge over `input` and `output`.
pub(crate) fn gated<R, W>(input: R, output: W) -> GatedLines<W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (to_rmcp, from_gate) = tokio::io::duplex(PIPE_BYTES);
    let (refuse, refusals) = mpsc::channel(REFUSALS);
    tokio::spawn(gate(input, to_rmcp, refuse));
    GatedLines {
        rmcp: AsyncRwTransport::new_server(from_gate, output),
        refusals,
    }
}

/// Passes `input` on to `to_rmcp` line by line, sending a refusal instead
/// of a line that must not run. A line longer than rmcp's limit goes on
/// unread (rmcp drops it). Ends at the end of `input`, which closes rmcp's.
async fn gate<R, W>(input: R, mut to_rmcp: W, refuse: mpsc::Sender<ServerJsonRpcMessage>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut chunk = Vec::new();
    let mut at_line_start = true;
    loop {
        chunk.clear();
        let limit = DEFAULT_MAX_LINE_LENGTH as u64 + 1;
        match (&mut input).take(limit).read_until(b'\n', &mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let whole_line = chunk.ends_with(b"\n");
        if at_line_start
            && whole_line
            && let Some(refusal) = repeated_keys::refusal(&chunk)
        {
            if refuse.send(refusal).await.is_err() {
                return;
            }
            continue;
        }
        at_line_start = whole_line;
        if to_rmcp.write_all(&chunk).await.is_err() {
            return;
        }
    }
}

impl<W> Transport<RoleServer> for GatedLines<W>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        self.rmcp.send(item)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            tokio::select! {
                message = self.rmcp.receive() => {
                    if message.is_none() {
                        // The input ended: the gate sent every refusal
                        // before it closed rmcp's, so all are here.
                        while let Ok(refusal) = self.refusals.try_recv() {
                            let _ = self.rmcp.send(refusal).await;
                        }
                    }
                    return message;
                }
                Some(refusal) = self.refusals.recv() => {
                    // Written on its own: this future may be dropped for
                    // another event, the refusal must still go out.
                    tokio::spawn(self.rmcp.send(refusal));
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        self.rmcp.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use tokio::io::AsyncBufReadExt;

    /// A refused line is answered on the output, even when the input ends
    /// right after it; the lines around it reach rmcp in order, whole.
    #[tokio::test]
    async fn refuses_repeated_keys_and_passes_the_rest() {
        let (mut client, server_in) = tokio::io::duplex(4096);
        let (server_out, client_out) = tokio::io::duplex(4096);
        let mut transport = gated(server_in, server_out);
        client
            .write_all(
                concat!(
                    r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
                    "\n",
                    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t","arguments":{"n":1,"n":2}}}"#,
                    "\n",
                    r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
                    "\n",
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        drop(client); // the input ends right after the lines
        // rmcp's service polls `receive` all along; so does this reader.
        let (passed, mut received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(message) = transport.receive().await {
                let _ = passed.send(serde_json::to_value(message).unwrap()["id"].clone());
            }
        });
        assert_eq!(received.recv().await.unwrap(), 1);
        assert_eq!(received.recv().await.unwrap(), 3);
        let mut answers = tokio::io::BufReader::new(client_out).lines();
        let refusal: Value =
            serde_json::from_str(&answers.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(refusal["id"], 2);
        assert_eq!(refusal["error"]["code"], -32602);
        assert!(
            refusal["error"]["message"]
                .as_str()
                .unwrap()
                .contains("repeat the key \"n\""),
            "{refusal}"
        );
    }

    /// A refused line that is the last of the input is still answered:
    /// the input's end does not cut the refusal off.
    #[tokio::test]
    async fn a_refusal_outlives_the_end_of_the_input() {
        let (mut client, server_in) = tokio::io::duplex(4096);
        let (server_out, client_out) = tokio::io::duplex(4096);
        let mut transport = gated(server_in, server_out);
        client
            .write_all(
                concat!(
                    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t","arguments":{"n":1,"n":2}}}"#,
                    "\n",
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        drop(client);
        while transport.refusals.is_empty() {
            tokio::task::yield_now().await;
        }
        assert!(transport.receive().await.is_none(), "the input ended");
        drop(transport);
        let mut answers = tokio::io::BufReader::new(client_out).lines();
        let refusal: Value =
            serde_json::from_str(&answers.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(refusal["id"], 2, "{refusal}");
    }
}
