//! Bytes on a client connection: frames through the client-sized `FrameCodec`, each body
//! decoded as a `ClientRequest`, a `Submit`'s commands checked as the driver checks them
//! (`command_ends` with the Bank), and a request that passes applied to a fresh Bank; a
//! `SubmitKeyed`'s runs checked as the leader checks them (`keyed_runs`).
//!
//! Mode byte: bit 0 set makes the data's frames pass their crc32 and carry this cluster's id
//! first; bits 1..8 give the bytes per read (1 to 128).

#![no_main]

use bank::Bank;
use engine::internals::batcher::{command_ends, keyed_runs};
use engine::internals::entry::{EntryHash, Request, whole_requests_entry};
use engine::{EntryIndex, ReplyStatus, StateMachine, Term};
use engine_fuzz::{CLUSTER, decode_stream, fix_frames, mode};
use libfuzzer_sys::fuzz_target;
use net::codec;
use net::frame::{CLIENT_FRAME_BODY_BYTES_MAX, FrameCodec};
use net::message::{ClientRequest, Submit, SubmitKeyed};

fuzz_target!(|input: &[u8]| {
    let Some((mode, data)) = mode(input) else {
        return;
    };
    let mut data = data.to_vec();
    if mode & 1 == 1 {
        fix_frames(&mut data);
    }
    let chunk_bytes = 1 + (mode >> 1) as usize;
    let mut codec = FrameCodec::with_limit(CLUSTER, CLIENT_FRAME_BODY_BYTES_MAX);
    decode_stream(&mut codec, &data, chunk_bytes, |body| {
        assert!(body.len() <= CLIENT_FRAME_BODY_BYTES_MAX);
        match codec::decode::<ClientRequest>(body) {
            Ok(ClientRequest::Submit(submit)) => admit(&submit),
            Ok(ClientRequest::SubmitKeyed(keyed)) => check_runs(&keyed),
            _ => {}
        }
    });
});

/// What the leader checks of a keyed request's runs: each checked run lies in the request,
/// after the one before, and carries its own commands' digest.
fn check_runs(keyed: &SubmitKeyed) {
    let submit = &keyed.submit;
    let Ok(ends) = command_ends::<Bank>(submit.request, &submit.commands, submit.command_count)
    else {
        return;
    };
    let Ok(checked) = keyed_runs(&keyed.runs, &submit.commands, &ends) else {
        return;
    };
    let mut next_free = 0;
    for (run, _) in &checked {
        assert!(run.count > 0 && run.first >= next_free && run.end() <= submit.command_count);
        next_free = run.end();
    }
}

/// What the driver does with a request before it reaches the log, then what every replica
/// does with it once it is committed.
fn admit(submit: &Submit) {
    let Ok(ends) = command_ends::<Bank>(submit.request, &submit.commands, submit.command_count)
    else {
        return;
    };
    assert_eq!(ends.len(), submit.command_count as usize);
    assert!(ends.windows(2).all(|w| w[0] < w[1]), "commands take bytes");
    // A registration (request 0) has no commands and no bytes.
    assert_eq!(ends.last().copied().unwrap_or(0), submit.commands.len() as u32);
    let request = Request {
        client: submit.client,
        number: submit.request,
        command_count: submit.command_count,
        commands: &submit.commands,
    };
    let entry = whole_requests_entry(EntryIndex(1), Term(1), &EntryHash::default(), 0, &[request]);
    let mut machine = StateMachine::new(Bank, 1 << 20);
    let applied = machine
        .apply(&entry)
        .expect("a request that passed admission applies");
    for reply in &applied.replies {
        if let ReplyStatus::Results(results) = &reply.status {
            engine::decode_outcomes::<Bank>(results, reply.command_count).expect("outcomes decode");
        }
    }
}
