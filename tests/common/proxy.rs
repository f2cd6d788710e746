//! A TCP proxy in front of the test Postgres server that a test can cut: a network partition
//! between one process and its database. Cutting drops every proxied connection (both ends see
//! the socket close) and blackholes new ones (accepted, never answered) until it is restored.

use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Default)]
struct Links {
    /// Where new connections go (`host:port`).
    upstream: String,
    cut: bool,
    /// One task per proxied connection; aborting it drops both sockets.
    open: Vec<JoinHandle<()>>,
    /// Connections accepted while cut: held open and silent.
    held: Vec<TcpStream>,
}

/// A running proxy to the test server (`super::server_url()`), on a local port of its own.
pub struct Proxy {
    port: u16,
    upstream: String,
    links: Arc<Mutex<Links>>,
    accept: JoinHandle<()>,
}

/// `host:port` of a `postgres://user@host:port[/db]` URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

impl Proxy {
    /// Listens on `127.0.0.1:<free port>` and forwards each connection to the test server.
    pub async fn start() -> Proxy {
        Proxy::to(&host_port(&super::server_url())).await
    }

    /// A proxy to `upstream` (`host:port`), as a failover address (a virtual IP, a DNS name)
    /// that [`repoint`](Proxy::repoint) moves.
    pub async fn to(upstream: &str) -> Proxy {
        let upstream = upstream.to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let links = Arc::new(Mutex::new(Links {
            upstream: upstream.clone(),
            ..Links::default()
        }));
        let accept = tokio::spawn(serve(listener, links.clone()));
        Proxy {
            port,
            upstream,
            links,
            accept,
        }
    }

    /// `url` (a database on the test server) reached through this proxy.
    pub fn url(&self, url: &str) -> String {
        url.replacen(&self.upstream, &format!("127.0.0.1:{}", self.port), 1)
    }

    /// Drops every open connection and blackholes new ones; returns how many were dropped.
    pub fn cut(&self) -> usize {
        let mut links = self.links.lock().unwrap();
        links.cut = true;
        let open: Vec<_> = links.open.drain(..).filter(|t| !t.is_finished()).collect();
        open.iter().for_each(JoinHandle::abort);
        open.len()
    }

    /// Sends new connections to `upstream` from now on and drops the open ones, as a failover
    /// address moving to the promoted server does.
    pub fn repoint(&self, upstream: &str) {
        self.links.lock().unwrap().upstream = upstream.to_owned();
        self.cut();
        self.restore();
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The proxy's own URL for database `db`.
    pub fn url_of(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Forwards again; connections accepted while cut are closed (their clients retry).
    pub fn restore(&self) {
        let mut links = self.links.lock().unwrap();
        links.cut = false;
        links.held.clear();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

async fn serve(listener: TcpListener, links: Arc<Mutex<Links>>) {
    while let Ok((mut client, _)) = listener.accept().await {
        let mut links = links.lock().unwrap();
        if links.cut {
            links.held.push(client);
            continue;
        }
        let upstream = links.upstream.clone();
        links.open.retain(|t| !t.is_finished());
        links.open.push(tokio::spawn(async move {
            if let Ok(mut server) = TcpStream::connect(&upstream).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            }
        }));
    }
}
