//! A RabbitMQ server of the test's own (`rabbitmq-server`, which `.ci/run` installs), on ports
//! the test picks, its data and logs in the test's directory, with its own `epmd`; both are
//! killed when dropped. And a reader of what reached a queue bound to an exchange.

use super::WAIT;
use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, Consumer, ExchangeKind};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;

/// Where the server program is (Debian's package puts it here, outside `PATH`).
const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// A running server; killed (with its epmd) when dropped.
pub struct Rabbit {
    server: Child,
    epmd: Child,
    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`.
    pub url: String,
}

impl Rabbit {
    /// Starts a server under `dir` on the first three free ports from `first_port` on (each
    /// test of a file names its own range: tests run at once) and waits until it takes
    /// connections.
    pub fn start(dir: &Path, first_port: u16) -> Rabbit {
        assert!(
            Path::new(SERVER).exists(),
            "{SERVER} is missing: install rabbitmq-server (.ci/run does)"
        );
        let port = super::gateway::free_port_from(first_port);
        let port: u16 = port.rsplit(':').next().unwrap().parse().unwrap();
        let (dist, epmd_port) = (port + 1, port + 2);
        let base = dir.join("rabbit");
        std::fs::create_dir_all(base.join("home")).unwrap();
        std::fs::write(
            base.join("rabbitmq.conf"),
            format!("listeners.tcp.default = {port}\n"),
        )
        .unwrap();
        std::fs::write(base.join("enabled_plugins"), "[].\n").unwrap();
        let epmd = Command::new("epmd")
            .args(["-port", &epmd_port.to_string()])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("epmd runs (it comes with rabbitmq-server)");
        let log = std::fs::File::create(base.join("server.log")).unwrap();
        let mut server = Command::new(SERVER)
            .current_dir(&base)
            .env("HOME", base.join("home"))
            .env("RABBITMQ_NODENAME", format!("rabbit_{port}@localhost"))
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env("RABBITMQ_DIST_PORT", dist.to_string())
            .env("ERL_EPMD_PORT", epmd_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", base.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", base.join("log"))
            .env("RABBITMQ_CONFIG_FILE", base.join("rabbitmq"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                base.join("enabled_plugins"),
            )
            .env("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "-start_epmd false")
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(log.try_clone().unwrap())
            .spawn()
            .expect("rabbitmq-server starts");
        let booted = watch_boot(server.stdout.take().expect("piped"), log);
        let rabbit = Rabbit {
            server,
            epmd,
            url: format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
        };
        let up = booted.recv_timeout(WAIT).unwrap_or(false);
        let log = std::fs::read_to_string(base.join("server.log")).unwrap_or_default();
        assert!(up, "RabbitMQ did not start:\n{log}");
        rabbit
    }
}

/// Copies the server's standard output into `log` on a thread of its own, and tells (true)
/// when the server says its boot completed (its listeners are up then), or (false) when its
/// output ends first.
fn watch_boot(output: ChildStdout, mut log: std::fs::File) -> mpsc::Receiver<bool> {
    let (told, booted) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
            if line.contains("Starting broker... completed") {
                let _ = told.send(true);
            }
        }
        let _ = told.send(false);
    });
    booted
}

impl Drop for Rabbit {
    fn drop(&mut self) {
        for child in [&mut self.server, &mut self.epmd] {
            // The server is a script that starts the Erlang VM in its process group.
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-9", "--", &group]).status();
            let _ = child.wait();
        }
    }
}

/// A queue bound to an exchange (declared as `publish` declares it: durable, topic) with
/// every routing key, and a consumer of the messages that reach it.
pub struct Queue {
    _connection: Connection,
    consumer: Consumer,
}

/// One message read from a queue: its `message_id` and body.
pub type Received = (String, serde_json::Value);

impl Queue {
    /// Declares `exchange` and a queue named `name` bound to it.
    pub async fn bind(url: &str, exchange: &str, name: &str) -> Queue {
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        let none = FieldTable::default;
        channel
            .exchange_declare(exchange.into(), ExchangeKind::Topic, durable, none())
            .await
            .unwrap();
        let queue = QueueDeclareOptions::durable();
        channel
            .queue_declare(name.into(), queue, none())
            .await
            .unwrap();
        let bind = QueueBindOptions::default();
        (channel.queue_bind(name.into(), exchange.into(), "#".into(), bind, none()))
            .await
            .unwrap();
        let consume = BasicConsumeOptions {
            no_ack: true,
            ..BasicConsumeOptions::default()
        };
        let consumer = (channel.basic_consume(name.into(), "test".into(), consume, none()))
            .await
            .unwrap();
        Queue {
            _connection: connection,
            consumer,
        }
    }

    /// The next message that reaches the queue, in order; fails the test after [`WAIT`].
    pub async fn next(&mut self) -> Received {
        let delivery = tokio::time::timeout(WAIT, self.consumer.next())
            .await
            .expect("a message within the wait")
            .expect("the consumer goes on")
            .unwrap();
        let id = delivery
            .properties
            .message_id()
            .clone()
            .map(|i| i.to_string());
        let body = serde_json::from_slice(&delivery.data).unwrap();
        (id.unwrap_or_default(), body)
    }
}
