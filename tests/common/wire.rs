//! A counting TCP proxy for the Postgres wire protocol: round trips are the server's
//! ReadyForQuery messages, statements its CommandComplete messages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
pub struct Counts {
    pub round_trips: AtomicU64,
    pub statements: AtomicU64,
}

/// A proxy in front of `upstream` (host:port). Clients must connect with `sslmode=disable`.
pub struct WireCounter {
    pub port: u16,
    pub counts: Arc<Counts>,
}

impl WireCounter {
    pub async fn start(upstream: &str) -> WireCounter {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(Counts::default());
        let (upstream, shared) = (upstream.to_owned(), counts.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(pump(client, server, shared.clone()));
            }
        });
        WireCounter { port, counts }
    }

    pub fn round_trips(&self) -> u64 {
        self.counts.round_trips.load(Ordering::SeqCst)
    }

    pub fn statements(&self) -> u64 {
        self.counts.statements.load(Ordering::SeqCst)
    }
}

async fn pump(client: TcpStream, server: TcpStream, counts: Arc<Counts>) {
    let (mut client_rd, mut client_wr) = client.into_split();
    let (mut server_rd, mut server_wr) = server.into_split();
    let upstream = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_rd, &mut server_wr).await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = match server_rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        // Every server message is a type byte and a big-endian length that counts itself.
        let mut at = 0;
        while pending.len() >= at + 5 {
            let len = u32::from_be_bytes(pending[at + 1..at + 5].try_into().unwrap()) as usize;
            if pending.len() < at + 1 + len {
                break;
            }
            match pending[at] {
                b'Z' => counts.round_trips.fetch_add(1, Ordering::SeqCst),
                b'C' => counts.statements.fetch_add(1, Ordering::SeqCst),
                _ => 0,
            };
            at += 1 + len;
        }
        pending.drain(..at);
        if client_wr.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    upstream.abort();
}
