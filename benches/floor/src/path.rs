//! The data path itself: a client, a leader and two followers as tokio tasks over loopback TCP.
//!
//! The client sends one batch and waits for its reply. The leader numbers the batch, sends it
//! to both followers, appends it to its own WAL (fdatasync), waits for one follower's
//! acknowledgement (itself and one follower are a majority of three), decodes and executes it
//! and replies with one status byte per command. A follower appends and syncs, acknowledges,
//! then decodes and executes. No terms, elections, sessions, hashes or snapshots.

use crate::ledger::Ledger;
use crate::stats::{Latencies, Rng};
use crate::wal::Wal;
use crate::wire::{self, Transfer};
use std::io::{Error, ErrorKind};
use std::net::SocketAddr;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Bytes of each connection's read buffer: a whole batch of 256 padded commands in one read.
const READ_BUFFER_BYTES: usize = 256 << 10;
/// Acknowledgements queued between a follower's reader task and the leader, at most (one
/// batch in flight leaves at most one per follower waiting).
const ACKS_QUEUED_MAX: usize = 16;
/// One batch in this many is warm-up: sent before the measurement starts, not measured.
const WARMUP_DIVISOR: u32 = 10;
/// The client's seed: every run sends the same commands.
const CLIENT_SEED: u64 = 0x5EED_F100;
/// The largest amount a transfer moves.
const TRANSFER_AMOUNT_MAX: u64 = 1_000_000;

/// What the client sends.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Commands per batch.
    pub batch: u32,
    /// Batches measured (after `batches / WARMUP_DIVISOR` of warm-up).
    pub batches: u32,
    /// Filler bytes after each command.
    pub pad: u32,
    /// Accounts the commands pick from.
    pub accounts: u32,
}

/// What the client measured.
pub struct Measured {
    /// Each measured batch's round trip.
    pub latencies: Latencies,
    /// Commands completed per second over the measured batches.
    pub commands_per_s: f64,
}

/// Accepts the one connection `listener` will get.
async fn accept(listener: std::net::TcpListener) -> std::io::Result<TcpStream> {
    listener.set_nonblocking(true)?;
    let (stream, _) = TcpListener::from_std(listener)?.accept().await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Connects to `address` with Nagle's delay off.
async fn connect(address: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(address).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A follower: each batch from the leader is checked, appended and synced, acknowledged, then
/// executed. Ends when the leader closes the connection.
pub async fn follower(
    listener: std::net::TcpListener,
    mut wal: Wal,
    mut ledger: Ledger,
) -> std::io::Result<()> {
    let (reader, mut writer) = accept(listener).await?.into_split();
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
    let (mut frame, mut batch, mut statuses) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(header) = wire::read_frame(&mut reader, &mut frame).await? {
        wire::check_crc(&frame)?;
        wal.append(&frame)?;
        writer.write_all(&header.seq.to_le_bytes()).await?;
        wire::decode_batch(wire::body(&frame), &mut batch)?;
        ledger.execute(&batch, &mut statuses);
    }
    Ok(())
}

/// The leader: serves one client until it disconnects (see the module's text for the steps).
pub async fn leader(
    listener: std::net::TcpListener,
    followers: [SocketAddr; 2],
    mut wal: Wal,
    mut ledger: Ledger,
) -> std::io::Result<()> {
    let (mut peers, mut acks) = connect_followers(followers).await?;
    let (reader, mut writer) = accept(listener).await?.into_split();
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
    let (mut frame, mut batch) = (Vec::new(), Vec::new());
    let (mut statuses, mut reply) = (Vec::new(), Vec::new());
    let mut seq = 0;
    while wire::read_frame(&mut reader, &mut frame).await?.is_some() {
        seq += 1;
        wire::check_crc(&frame)?;
        wire::set_seq(&mut frame, seq);
        replicate(&mut peers, &frame).await?;
        wal.append(&frame)?;
        await_quorum(&mut acks, seq).await?;
        wire::decode_batch(wire::body(&frame), &mut batch)?;
        ledger.execute(&batch, &mut statuses);
        wire::encode_reply(&statuses, seq, &mut reply);
        writer.write_all(&reply).await?;
    }
    Ok(())
}

/// Connects to both followers; their acknowledgements arrive on one channel, read by a task
/// per follower.
async fn connect_followers(
    followers: [SocketAddr; 2],
) -> std::io::Result<([OwnedWriteHalf; 2], mpsc::Receiver<u64>)> {
    let (sender, acks) = mpsc::channel(ACKS_QUEUED_MAX);
    let (reader_one, writer_one) = connect(followers[0]).await?.into_split();
    let (reader_two, writer_two) = connect(followers[1]).await?.into_split();
    for reader in [reader_one, reader_two] {
        tokio::spawn(forward_acks(reader, sender.clone()));
    }
    Ok(([writer_one, writer_two], acks))
}

/// Passes a follower's acknowledgements (a sequence number each) to the leader, until either
/// side goes away.
async fn forward_acks(mut reader: OwnedReadHalf, sender: mpsc::Sender<u64>) {
    let mut ack = [0; 8];
    while reader.read_exact(&mut ack).await.is_ok() {
        if sender.send(u64::from_le_bytes(ack)).await.is_err() {
            return;
        }
    }
}

/// Sends `frame` to both followers at once.
async fn replicate(peers: &mut [OwnedWriteHalf; 2], frame: &[u8]) -> std::io::Result<()> {
    let [one, two] = peers;
    let (sent_one, sent_two) = tokio::join!(one.write_all(frame), two.write_all(frame));
    sent_one.and(sent_two)
}

/// Waits for the first acknowledgement of `seq`; older ones (the slower follower's) are passed
/// over.
async fn await_quorum(acks: &mut mpsc::Receiver<u64>, seq: u64) -> std::io::Result<()> {
    loop {
        match acks.recv().await {
            Some(acked) if acked == seq => return Ok(()),
            Some(acked) => assert!(acked < seq, "acknowledged {acked} before it was sent"),
            None => return Err(Error::new(ErrorKind::BrokenPipe, "both followers left")),
        }
    }
}

/// The client: one batch in flight, each measured from its first byte sent to its reply read.
pub async fn client(leader: SocketAddr, plan: Plan) -> std::io::Result<Measured> {
    let (reader, mut writer) = connect(leader).await?.into_split();
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
    let mut rng = Rng::new(CLIENT_SEED);
    let (mut transfers, mut frame, mut reply) = (Vec::new(), Vec::new(), Vec::new());
    let mut latencies = Latencies::with_capacity(plan.batches as usize);
    let warmup = plan.batches / WARMUP_DIVISOR;
    let mut start = Instant::now();
    for sent in 0..warmup + plan.batches {
        if sent == warmup {
            start = Instant::now();
        }
        draw_batch(&mut rng, plan, &mut transfers);
        wire::encode_batch(&transfers, plan.pad as usize, &mut frame);
        let round_trip = Instant::now();
        writer.write_all(&frame).await?;
        let eof = || Error::new(ErrorKind::UnexpectedEof, "the leader closed the connection");
        let header = wire::read_frame(&mut reader, &mut reply)
            .await?
            .ok_or_else(eof)?;
        if sent >= warmup {
            latencies.record(round_trip.elapsed());
        }
        if header.body_bytes != plan.batch {
            let what = format!("{} statuses for {} commands", header.body_bytes, plan.batch);
            return Err(Error::new(ErrorKind::InvalidData, what));
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let commands = f64::from(plan.batches) * f64::from(plan.batch);
    Ok(Measured {
        latencies,
        commands_per_s: commands / seconds,
    })
}

/// Draws a batch of transfers between distinct random accounts into `transfers`.
fn draw_batch(rng: &mut Rng, plan: Plan, transfers: &mut Vec<Transfer>) {
    assert!(plan.accounts >= 2, "a transfer needs two accounts");
    let accounts = u64::from(plan.accounts);
    transfers.clear();
    for _ in 0..plan.batch {
        let from = rng.below(accounts) as u32;
        let to = (u64::from(from) + 1 + rng.below(accounts - 1)) % accounts;
        transfers.push(Transfer {
            id: rng.next_u64(),
            from,
            to: to as u32,
            amount: 1 + rng.below(TRANSFER_AMOUNT_MAX),
        });
    }
}
