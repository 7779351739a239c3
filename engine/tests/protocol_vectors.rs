//! The native protocol as `notes/protocol.md` writes it down is the code's: every hex vector in
//! the document decodes, with the real frame codec and message types, to the value built here,
//! and that value encodes to the document's bytes; the handshake's MAC is what the document
//! says; every tag table in the document lists the code's tags, which are the variants'
//! positions of protocol version 4 (the tags were made explicit without changing a byte).

use engine::codec::{self, Decode, DecodeError, Encode};
use engine::handler::outcome_tags;
use engine::{ClientId, EntryIndex, NodeId, Outcome, RequestNumber, Term};
use net::auth::{Key, NONCE_BYTES};
use net::entry::EntryKind;
use net::frame::FrameCodec;
use net::ids::StateHash;
use net::message::{
    Admission, Append, AppendOutcome, AppendReply, BackupChunk, BackupRequest, Challenge,
    ClientReply, ClientRequest, ClientRole, Credential, HandlerVersions, Hello, KeyRun, LogEnd,
    Member, MemberChange, MembersRefusal, Mode, NodeStatus, PROTOCOL_VERSION, PeerMessage, Read,
    ReadCheck, ReadCheckReply, Refusal, Rejection, Role, SnapshotChunk, Stages, Submit,
    SubmitKeyed, UpgradeRefusal, Vote, VoteReply, tags,
};
use std::collections::BTreeMap;
use std::fmt::Debug;

/// The cluster id of every vector: its bytes show the byte order.
const CLUSTER: u64 = 0x0102_0304_0506_0708;
/// The client id of every vector.
const CLIENT: ClientId = ClientId(0x0001_0203_0405_0607_0809_0a0b_0c0d_0e0f);
/// The client secret the client proof vector is made with.
const CLIENT_SECRET: &[u8] = b"an example client secret";
/// The cluster secret the peer proof vector is made with.
const PEER_SECRET: &[u8] = b"an example cluster secret";
/// The key-derivation contexts, as the document gives them.
const CLIENT_KEY_CONTEXT: &str = "replicated-bank 2026-11-30 client handshake";
const PEER_KEY_CONTEXT: &str = "replicated-bank 2026-11-30 peer handshake";
/// What opens a vector's fenced block in the document: "```hex vector NAME".
const VECTOR_FENCE: &str = "```hex vector ";
/// Tags probed for being known to a type's decoder, from 0.
const TAGS_PROBED: u32 = 256;

/// The example handler of the document: a counter per id.
mod counter {
    use engine::codec::{Decode, Encode};

    /// Its commands.
    #[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
    pub enum Command {
        /// Adds `by` to counter `counter`; returns the new value.
        Add { counter: u32, by: u64 },
        /// Returns counter `counter`'s value (read-only).
        Get { counter: u32 },
    }

    /// Its business errors.
    #[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
    pub enum Error {
        /// The sum passed `u64::MAX`.
        Overflow,
    }
}

type CounterOutcome = Outcome<u64, counter::Error>;

fn document() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../notes/protocol.md");
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// Every vector of the document by name: its hex, `#` comments and whitespace dropped.
fn vectors(document: &str) -> BTreeMap<String, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut lines = document.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.trim().strip_prefix(VECTOR_FENCE) else {
            continue;
        };
        let mut hex = String::new();
        for line in lines.by_ref().take_while(|line| line.trim() != "```") {
            let data = line.split('#').next().unwrap_or("");
            hex.extend(data.chars().filter(|c| !c.is_whitespace()));
        }
        let bytes = from_hex(&hex).unwrap_or_else(|| panic!("vector {name}: bad hex {hex}"));
        let earlier = found.insert(name.trim().to_string(), bytes);
        assert!(earlier.is_none(), "vector {name} twice in the document");
    }
    found
}

fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(hex.get(at..at + 2)?, 16).ok())
        .collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A check of a vector's documented bytes: why they are wrong, if they are.
type Check = Box<dyn Fn(&[u8]) -> Result<(), String>>;

/// One vector the code builds: its name and a check of the document's bytes.
struct Case {
    name: &'static str,
    check: Check,
}

/// The vector `name`: `value` as one frame of [`CLUSTER`].
fn case<T>(name: &'static str, value: T) -> Case
where
    T: Encode + Decode + PartialEq + Debug + 'static,
{
    let check = move |documented: &[u8]| {
        let codec = FrameCodec::new(CLUSTER);
        let encoded = codec.frame(&value).map_err(|e| e.to_string())?;
        if encoded[..] != *documented {
            return Err(format!(
                "the code encodes {value:?} as\n{}",
                to_hex(&encoded)
            ));
        }
        let mut reader = documented;
        let body = codec.read_frame(&mut reader).map_err(|e| e.to_string())?;
        if !reader.is_empty() {
            return Err(format!("{} bytes after the frame", reader.len()));
        }
        let decoded: T = codec::decode(&body).map_err(|e| e.to_string())?;
        match decoded == value {
            true => Ok(()),
            false => Err(format!("decodes to {decoded:?}, not {value:?}")),
        }
    };
    Case {
        name,
        check: Box::new(check),
    }
}

/// The nonce of the challenge vector: bytes 0 to 31.
fn nonce() -> [u8; NONCE_BYTES] {
    std::array::from_fn(|at| at as u8)
}

fn hello(node: Option<NodeId>) -> Hello {
    Hello {
        version: PROTOCOL_VERSION,
        cluster: CLUSTER,
        node,
    }
}

fn handshake_cases() -> Vec<Case> {
    let client_key = Key::client(CLIENT_SECRET).unwrap();
    let peer_key = Key::peer(PEER_SECRET).unwrap();
    let connection = (CLUSTER, PROTOCOL_VERSION);
    let client_proof = client_key.prove(connection, None, None, &nonce());
    let peer_proof = peer_key.prove(connection, Some(NodeId(2)), Some(NodeId(1)), &nonce());
    let version = Refusal::Version {
        theirs: PROTOCOL_VERSION + 1,
        ours: PROTOCOL_VERSION,
    };
    vec![
        case("hello-client", hello(None)),
        case("hello-peer", hello(Some(NodeId(2)))),
        case("challenge", Challenge { nonce: nonce() }),
        case("proof-client", client_proof),
        case("proof-peer", peer_proof),
        case("admission-accepted", Admission::Accepted),
        case("admission-refused-version", Admission::Refused(version)),
    ]
}

fn commands(commands: &[counter::Command]) -> Vec<u8> {
    commands
        .iter()
        .flat_map(|command| codec::encode_to_vec(command).unwrap())
        .collect()
}

fn outcomes(outcomes: &[CounterOutcome]) -> Vec<u8> {
    outcomes
        .iter()
        .flat_map(|outcome| codec::encode_to_vec(outcome).unwrap())
        .collect()
}

fn request_cases() -> Vec<Case> {
    use counter::Command::{Add, Get};
    let register = Submit {
        client: CLIENT,
        request: RequestNumber(0),
        oldest_pending: RequestNumber(0),
        command_count: 0,
        commands: Vec::new(),
    };
    let submit = Submit {
        client: CLIENT,
        request: RequestNumber(1),
        oldest_pending: RequestNumber(1),
        command_count: 2,
        commands: commands(&[Add { counter: 3, by: 5 }, Get { counter: 3 }]),
    };
    let keyed = SubmitKeyed {
        submit: Submit {
            client: CLIENT,
            request: RequestNumber(2),
            oldest_pending: RequestNumber(2),
            command_count: 2,
            commands: commands(&[Add { counter: 3, by: 5 }, Add { counter: 4, by: 1 }]),
        },
        runs: vec![KeyRun {
            key: ClientId(0x1111_2222_3333_4444_5555_6666_7777_8888),
            first: 1,
            count: 1,
        }],
    };
    let read = Read {
        client: CLIENT,
        read: 7,
        command_count: 1,
        commands: commands(&[Get { counter: 3 }]),
    };
    vec![
        case("request-register", ClientRequest::Submit(register)),
        case("request-submit", ClientRequest::Submit(submit)),
        case("request-submit-keyed", ClientRequest::SubmitKeyed(keyed)),
        case("request-read", ClientRequest::Read(read)),
        case("request-resume", ClientRequest::Resume(CLIENT)),
        case("request-status", ClientRequest::Status),
    ]
}

fn reply_cases() -> Vec<Case> {
    let results = ClientReply::Results {
        client: CLIENT,
        request: RequestNumber(1),
        command_count: 2,
        results: outcomes(&[Outcome::Done(5), Outcome::Failed(counter::Error::Overflow)]),
    };
    let registered = ClientReply::Results {
        client: CLIENT,
        request: RequestNumber(0),
        command_count: 0,
        results: Vec::new(),
    };
    let not_leader = ClientReply::NotLeader {
        leader: Some(NodeId(2)),
        address: Some("10.0.0.2:7001".into()),
    };
    let busy = ClientReply::Rejected {
        request: RequestNumber(1),
        reason: Rejection::Busy,
    };
    let read = ClientReply::ReadResults {
        command_count: 1,
        results: outcomes(&[Outcome::Done(5)]),
    };
    let session = ClientReply::Session {
        client: CLIENT,
        next_request: RequestNumber(2),
        expired: false,
    };
    let unknown = ClientReply::NotLeader {
        leader: None,
        address: None,
    };
    vec![
        case("reply-results", results),
        case("reply-registered", registered),
        case("reply-not-leader", not_leader),
        case("reply-not-leader-unknown", unknown),
        case("reply-rejected-busy", busy),
        case("reply-read-results", read),
        case("reply-session", session),
        case(
            "reply-not-yet",
            ClientReply::NotYet {
                request: RequestNumber(2),
            },
        ),
        case(
            "reply-refused-idle",
            ClientReply::Refused(Refusal::IdleTimeout),
        ),
    ]
}

fn peer_cases() -> Vec<Case> {
    let check = ReadCheck {
        term: Term(3),
        leader: NodeId(1),
        round: 9,
    };
    vec![case("peer-read-check", PeerMessage::ReadCheck(check))]
}

fn cases() -> Vec<Case> {
    let mut cases = handshake_cases();
    cases.extend(request_cases());
    cases.extend(reply_cases());
    cases.extend(peer_cases());
    cases
}

/// Proves every vector of the document is one the code builds, byte for byte both ways, and
/// every vector the code builds is in the document.
#[test]
fn the_documents_vectors_are_the_codes_bytes() {
    let mut documented = vectors(&document());
    let mut wrong = Vec::new();
    for case in cases() {
        match documented.remove(case.name) {
            None => wrong.push(format!("{}: not in the document", case.name)),
            Some(bytes) => {
                if let Err(why) = (case.check)(&bytes) {
                    wrong.push(format!("{}: {why}", case.name));
                }
            }
        }
    }
    wrong.extend(
        documented
            .keys()
            .map(|name| format!("{name}: no such case here")),
    );
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// Proves the document's description of the proof: the key is blake3's `derive_key` of the
/// credential's context and the secret; the MAC is blake3 keyed with it over the cluster id,
/// the caller's and the listener's identities, the version and the nonce.
#[test]
fn the_proof_is_the_documented_mac() {
    let mac = |context: &str, secret: &[u8], caller: [u8; 2], listener: [u8; 2]| {
        let key = blake3::derive_key(context, secret);
        let mut mac = blake3::Hasher::new_keyed(&key);
        mac.update(&CLUSTER.to_le_bytes());
        mac.update(&caller);
        mac.update(&listener);
        mac.update(&PROTOCOL_VERSION.to_le_bytes());
        mac.update(&nonce());
        *mac.finalize().as_bytes()
    };
    let connection = (CLUSTER, PROTOCOL_VERSION);
    let client = Key::client(CLIENT_SECRET).unwrap();
    assert_eq!(
        client.prove(connection, None, None, &nonce()).mac,
        mac(CLIENT_KEY_CONTEXT, CLIENT_SECRET, [0, 0], [0, 0])
    );
    let peer = Key::peer(PEER_SECRET).unwrap();
    let (caller, listener) = (Some(NodeId(2)), Some(NodeId(1)));
    assert_eq!(
        peer.prove(connection, caller, listener, &nonce()).mac,
        mac(PEER_KEY_CONTEXT, PEER_SECRET, [2, 1], [1, 1])
    );
}

/// An enum's tags as the code has them: (tag, variant) in declaration order.
type Tags = Vec<(u32, String)>;

/// The tags of enum `type_name` from one value of each variant, in declaration order, each
/// with the tag it must have; checks that each value encodes that tag, that it is the
/// variant's position (what the tag was before it was explicit), and that the decoder knows
/// no other tag (a variant left out here would be one).
fn tags_of<T: Encode + Decode + Debug>(
    type_name: &'static str,
    values: Vec<(u32, T)>,
) -> (&'static str, Tags) {
    let mut table = Vec::new();
    for (position, (tag, value)) in values.into_iter().enumerate() {
        let bytes = codec::encode_to_vec(&value).unwrap();
        let written = u32::from_le_bytes(bytes[..4].try_into().unwrap());
        assert_eq!(
            written, tag,
            "{type_name}: {value:?} is written with another tag"
        );
        assert_eq!(
            tag as usize, position,
            "{type_name}: {value:?} changed its tag"
        );
        let debug = format!("{value:?}");
        let name = debug.split(|c: char| !c.is_alphanumeric()).next().unwrap();
        table.push((tag, name.to_string()));
    }
    let known: Vec<u32> = (0..TAGS_PROBED)
        .filter(|tag| decoder_knows::<T>(type_name, *tag))
        .collect();
    let listed: Vec<u32> = table.iter().map(|(tag, _)| *tag).collect();
    assert_eq!(known, listed, "{type_name}: the decoder knows other tags");
    (type_name, table)
}

/// True unless `T`'s decoder refuses `tag` as naming no variant of `type_name`.
fn decoder_knows<T: Decode>(type_name: &str, tag: u32) -> bool {
    let mut bytes = tag.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[0; 64]);
    !matches!(
        codec::decode::<T>(&bytes),
        Err(codec::CodecError::Decode(DecodeError::UnexpectedVariant { type_name: found, .. }))
            if found == type_name
    )
}

fn handshake_tags() -> Vec<(&'static str, Tags)> {
    use tags::{admission as a, client_role as c, credential as k, refusal as r};
    let refusals = vec![
        (r::VERSION, Refusal::Version { theirs: 5, ours: 4 }),
        (
            r::WRONG_CLUSTER,
            Refusal::WrongCluster { theirs: 1, ours: 2 },
        ),
        (r::NOT_A_PEER, Refusal::NotAPeer { caller: None }),
        (r::NODE_ON_CLIENT_PORT, Refusal::NodeOnClientPort),
        (r::UNAUTHENTICATED, Refusal::Unauthenticated),
        (
            r::TOO_MANY_CONNECTIONS,
            Refusal::TooManyConnections { limit: 1 },
        ),
        (r::HANDSHAKE_TIMEOUT, Refusal::HandshakeTimeout),
        (r::READ_TIMEOUT, Refusal::ReadTimeout),
        (r::IDLE_TIMEOUT, Refusal::IdleTimeout),
        (r::EMPTY_FRAME, Refusal::EmptyFrame),
        (
            r::FRAME_TOO_LARGE,
            Refusal::FrameTooLarge { bytes: 2, limit: 1 },
        ),
        (r::BAD_CRC, Refusal::BadCrc),
        (r::UNDECODABLE, Refusal::Undecodable),
        (
            r::FORBIDDEN,
            Refusal::Forbidden {
                role: ClientRole::Application,
            },
        ),
        (
            r::WRONG_CREDENTIAL,
            Refusal::WrongCredential {
                proved: Credential::Application,
                needs: ClientRole::Operator,
            },
        ),
    ];
    let admissions = vec![
        (a::ACCEPTED, Admission::Accepted),
        (a::REFUSED, Admission::Refused(Refusal::BadCrc)),
    ];
    let roles = vec![
        (c::APPLICATION, ClientRole::Application),
        (c::OPERATOR, ClientRole::Operator),
    ];
    let credentials = vec![
        (k::PEER, Credential::Peer),
        (k::APPLICATION, Credential::Application),
        (k::OPERATOR, Credential::Operator),
    ];
    vec![
        tags_of("Admission", admissions),
        tags_of("Refusal", refusals),
        tags_of("ClientRole", roles),
        tags_of("Credential", credentials),
    ]
}

/// One value of each variant of `PeerMessage`, with its tag.
fn peer_messages() -> Vec<(u32, PeerMessage)> {
    let mut messages = log_messages();
    messages.extend(other_peer_messages());
    messages
}

/// The messages that replicate the log and elect its leader.
fn log_messages() -> Vec<(u32, PeerMessage)> {
    use PeerMessage as M;
    use tags::peer_message as p;
    let (term, node, index) = (Term(3), NodeId(1), EntryIndex(9));
    let (leader, from, applied) = (node, node, None);
    let (prev_index, prev_term, last_index, last_term) = (index, term, index, term);
    let (pre, granted) = (true, true);
    let (commit, entries, outcome) = (index, Vec::new(), AppendOutcome::Matched { index });
    let append = Append {
        term,
        leader,
        prev_index,
        prev_term,
        entries,
        commit,
        applied,
    };
    let reply = AppendReply {
        term,
        from,
        outcome,
        applied,
    };
    let vote = Vote {
        term,
        pre,
        candidate: node,
        last_index,
        last_term,
    };
    let answer = VoteReply {
        term,
        pre,
        from,
        granted,
    };
    vec![
        (p::APPEND, M::Append(append)),
        (p::APPEND_REPLY, M::AppendReply(reply)),
        (p::VOTE, M::Vote(vote)),
        (p::VOTE_REPLY, M::VoteReply(answer)),
    ]
}

/// The messages that carry snapshots, repair logs and confirm reads.
fn other_peer_messages() -> Vec<(u32, PeerMessage)> {
    use PeerMessage as M;
    use tags::peer_message as p;
    let (term, node, index) = (Term(3), NodeId(1), EntryIndex(9));
    let (leader, from, round, ask) = (node, node, 1, true);
    let (offset, total, data) = (0, 1, vec![1]);
    let chunk = SnapshotChunk {
        term,
        leader,
        index,
        offset,
        total,
        data,
    };
    let end = LogEnd {
        term,
        from,
        last_index: index,
        last_term: term,
        ask,
    };
    let check = ReadCheck {
        term,
        leader,
        round,
    };
    vec![
        (p::SNAPSHOT, M::Snapshot(chunk)),
        (p::LOG_END, M::LogEnd(end)),
        (p::READ_CHECK, M::ReadCheck(check)),
        (
            p::READ_CHECK_REPLY,
            M::ReadCheckReply(ReadCheckReply { term, from, round }),
        ),
    ]
}

fn peer_tags() -> Vec<(&'static str, Tags)> {
    use net::entry::entry_kind_tags as k;
    use tags::append_outcome as o;
    let index = EntryIndex(9);
    let outcomes = vec![
        (o::MATCHED, AppendOutcome::Matched { index }),
        (o::CONFLICT, AppendOutcome::Conflict { hint: index }),
    ];
    // The codec tags: the Rust discriminants (1 to 5) are what the hash chain takes.
    let kinds = vec![
        (k::COMMANDS, EntryKind::Commands),
        (k::NOOP, EntryKind::Noop),
        (k::MEMBERS, EntryKind::Members),
        (k::UPGRADE, EntryKind::Upgrade),
        (k::KEYED_COMMANDS, EntryKind::KeyedCommands),
    ];
    vec![
        tags_of("PeerMessage", peer_messages()),
        tags_of("AppendOutcome", outcomes),
        tags_of("EntryKind", kinds),
    ]
}

fn request_tags() -> Vec<(&'static str, Tags)> {
    use ClientRequest as Q;
    use tags::client_request as q;
    let (client, command_count, commands) = (CLIENT, 0, Vec::new());
    let submit = Submit {
        client,
        request: RequestNumber(1),
        oldest_pending: RequestNumber(1),
        command_count,
        commands: commands.clone(),
    };
    let submit_keyed = submit.clone();
    let read = Read {
        client,
        read: 1,
        command_count,
        commands,
    };
    let (index, offset) = (None, 0);
    let requests = vec![
        (q::SUBMIT, Q::Submit(submit)),
        (q::STATUS, Q::Status),
        (q::SET_MODE, Q::SetMode(Mode::Verify)),
        (q::RESUME, Q::Resume(client)),
        (q::BACKUP, Q::Backup(BackupRequest { index, offset })),
        (
            q::CHANGE_MEMBERS,
            Q::ChangeMembers(MemberChange::Remove(NodeId(3))),
        ),
        (q::UPGRADE, Q::Upgrade(2)),
        (q::VERSIONS, Q::Versions),
        (q::READ, Q::Read(read)),
        (q::BUILD, Q::Build),
        (
            q::SUBMIT_KEYED,
            Q::SubmitKeyed(SubmitKeyed {
                submit: submit_keyed,
                runs: Vec::new(),
            }),
        ),
        (
            q::CHANGES,
            Q::Changes(net::message::ChangesRequest {
                from: net::message::ChangePosition::default(),
                bytes_max: 1,
                wait_ms: 0,
            }),
        ),
    ];
    vec![tags_of("ClientRequest", requests)]
}

fn status() -> NodeStatus {
    NodeStatus {
        node: NodeId(1),
        role: Role::Leader,
        term: Term(3),
        leader: Some(NodeId(1)),
        last_index: EntryIndex(9),
        commit_index: EntryIndex(9),
        applied_index: EntryIndex(9),
        state_hash: StateHash([0; 32]),
        divergence: None,
        halted: None,
        storage_full: false,
        mode: Mode::Verify,
        stages: Stages::default(),
        members: vec![NodeId(1)],
        members_pending: false,
    }
}

/// One value of each variant of `ClientReply` that answers a request or a read, with its tag.
fn request_replies() -> Vec<(u32, ClientReply)> {
    use ClientReply as Y;
    use tags::client_reply as y;
    let (client, request, command_count) = (CLIENT, RequestNumber(1), 0);
    let (leader, address, reason) = (None, None, Rejection::Busy);
    let (next_request, expired) = (request, false);
    vec![
        (
            y::RESULTS,
            Y::Results {
                client,
                request,
                command_count,
                results: Vec::new(),
            },
        ),
        (y::NOT_LEADER, Y::NotLeader { leader, address }),
        (y::REJECTED, Y::Rejected { request, reason }),
        (y::STALE, Y::Stale { request }),
        (y::EXPIRED, Y::Expired { request }),
        (y::REUSED, Y::Reused { request }),
        (y::NOT_YET, Y::NotYet { request }),
        (
            y::SESSION,
            Y::Session {
                client,
                next_request,
                expired,
            },
        ),
    ]
}

/// One value of each other variant of `ClientReply`, with its tag.
fn other_replies() -> Vec<(u32, ClientReply)> {
    use ClientReply as Y;
    use tags::client_reply as y;
    let (node, index, mode) = (NodeId(1), EntryIndex(9), Mode::Verify);
    let (offset, total, data) = (0, 1, vec![1]);
    let chunk = BackupChunk {
        node,
        index,
        mode,
        offset,
        total,
        data,
    };
    let versions = HandlerVersions {
        node,
        in_force: 1,
        applied_index: index,
        oldest: 1,
        newest: 1,
    };
    let (command_count, results, reason) = (0, Vec::new(), String::new());
    let build = net::message::BuildInfo {
        version: "0.1.0".into(),
        commit: "unknown".into(),
        formats: engine::formats::describe(),
    };
    vec![
        (y::STATUS, Y::Status(Box::new(status()))),
        (y::MODE_SET, Y::ModeSet(mode)),
        (y::REFUSED, Y::Refused(Refusal::BadCrc)),
        (y::BACKUP_CHUNK, Y::BackupChunk(chunk)),
        (y::NO_BACKUP, Y::NoBackup { reason }),
        (y::MEMBERS_CHANGING, Y::MembersChanging { index }),
        (
            y::MEMBERS_REFUSED,
            Y::MembersRefused(MembersRefusal::Pending),
        ),
        (y::UPGRADING, Y::Upgrading { index }),
        (
            y::UPGRADE_REFUSED,
            Y::UpgradeRefused(UpgradeRefusal::Halted),
        ),
        (y::VERSIONS, Y::Versions(versions)),
        (
            y::READ_RESULTS,
            Y::ReadResults {
                command_count,
                results,
            },
        ),
        (y::BUILD, Y::Build(build)),
        (
            y::CHANGES,
            Y::Changes(net::message::ChangeBatch {
                node: NodeId(1),
                entries: Vec::new(),
                next: net::message::ChangePosition::default(),
                applied: index,
            }),
        ),
        (y::NO_CHANGES, Y::NoChanges(changes_refusals().remove(0).1)),
    ]
}

/// One refusal of the change stream of each kind, with its tag.
fn changes_refusals() -> Vec<(u32, net::message::ChangesRefusal)> {
    use net::message::ChangesRefusal as C;
    use tags::changes_refusal as c;
    let (node, from, to) = (NodeId(1), EntryIndex(1), EntryIndex(2));
    vec![
        (
            c::GONE,
            C::Gone {
                node,
                asked: from,
                oldest: to,
            },
        ),
        (c::MISSING, C::Missing { node, from, to }),
        (
            c::UNREADABLE,
            C::Unreadable {
                node,
                reason: String::new(),
            },
        ),
        (c::OFF, C::Off { node }),
    ]
}

fn reply_tags() -> Vec<(&'static str, Tags)> {
    let mut replies = request_replies();
    replies.extend(other_replies());
    vec![tags_of("ClientReply", replies)]
}

fn answer_tags() -> Vec<(&'static str, Tags)> {
    use counter::Error::Overflow;
    use tags::{mode, rejection as r, role};
    let rejections = vec![
        (r::EMPTY, Rejection::Empty),
        (
            r::TOO_MANY_COMMANDS,
            Rejection::TooManyCommands { count: 1025 },
        ),
        (r::MALFORMED, Rejection::Malformed { command: 0 }),
        (r::HALTED, Rejection::Halted),
        (r::BUSY, Rejection::Busy),
        (r::STORAGE_FULL, Rejection::StorageFull),
        (r::NOT_READ_ONLY, Rejection::NotReadOnly { command: 0 }),
        (r::OLDER_MEMBERS, Rejection::OlderMembers),
    ];
    let modes = vec![
        (mode::VERIFY, Mode::Verify),
        (mode::PERFORMANCE, Mode::Performance),
    ];
    let roles = vec![
        (role::FOLLOWER, Role::Follower),
        (role::CANDIDATE, Role::Candidate),
        (role::LEADER, Role::Leader),
    ];
    let outcomes: Vec<(u32, CounterOutcome)> = vec![
        (outcome_tags::DONE, Outcome::Done(1)),
        (outcome_tags::FAILED, Outcome::Failed(Overflow)),
        (outcome_tags::INVALID, Outcome::Invalid),
    ];
    vec![
        tags_of("Rejection", rejections),
        tags_of("Mode", modes),
        tags_of("Role", roles),
        tags_of("Outcome", outcomes),
    ]
}

fn operator_tags() -> Vec<(&'static str, Tags)> {
    use tags::{member_change as c, members_refusal as m, upgrade_refusal as u};
    let (id, peer_address, client_address) = (NodeId(4), String::new(), String::new());
    let member = Member {
        id,
        peer_address,
        client_address,
    };
    let changes = vec![
        (c::ADD, MemberChange::Add(member)),
        (c::REMOVE, MemberChange::Remove(id)),
    ];
    let refusals = vec![
        (m::PENDING, MembersRefusal::Pending),
        (m::NOT_SETTLED, MembersRefusal::NotSettled),
        (m::INVALID, MembersRefusal::Invalid(String::new())),
    ];
    let (version, oldest, newest, in_force) = (3, 1, 2, 2);
    let upgrades = vec![
        (
            u::UNSUPPORTED,
            UpgradeRefusal::Unsupported {
                version,
                oldest,
                newest,
            },
        ),
        (u::NOT_NEWER, UpgradeRefusal::NotNewer { version, in_force }),
        (u::HALTED, UpgradeRefusal::Halted),
    ];
    vec![
        tags_of("MemberChange", changes),
        tags_of("MembersRefusal", refusals),
        tags_of("UpgradeRefusal", upgrades),
        tags_of("ChangesRefusal", changes_refusals()),
    ]
}

/// Every tag table of the document by enum: a table whose header is `| tag | Enum | ...`, its
/// rows `| N | `Variant` | ...`.
fn tag_tables(document: &str) -> BTreeMap<String, Tags> {
    let mut tables = BTreeMap::new();
    let mut lines = document.lines().peekable();
    while let Some(line) = lines.next() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 3 || cells[1] != "tag" {
            continue;
        }
        let name = cells[2].trim_matches('`').to_string();
        let mut rows = Vec::new();
        while let Some(row) = lines.next_if(|row| row.trim_start().starts_with('|')) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            if let Ok(tag) = cells[1].parse::<u32>() {
                rows.push((tag, cells[2].trim_matches('`').to_string()));
            }
        }
        assert!(
            tables.insert(name.clone(), rows).is_none(),
            "{name}: two tables"
        );
    }
    tables
}

/// Proves every enum on the wire keeps the tags it had (its variants' positions), that the
/// explicit tag constants say the same, and that the document's tag tables list exactly them.
#[test]
fn tags_are_the_old_positions_and_the_documents() {
    let mut code = handshake_tags();
    code.extend(peer_tags());
    code.extend(request_tags());
    code.extend(reply_tags());
    code.extend(answer_tags());
    code.extend(operator_tags());
    let mut documented = tag_tables(&document());
    for (name, tags) in code {
        let table = documented.remove(name);
        assert_eq!(table.as_ref(), Some(&tags), "{name}: the document's table");
    }
    let unknown: Vec<&String> = documented.keys().collect();
    assert!(unknown.is_empty(), "tables of no enum here: {unknown:?}");
}

/// Proves tags that are not positions work both ways: a variant's tag replaces its position,
/// the order of the variants no longer matters, and an unknown tag names the largest.
#[test]
fn explicit_tags_replace_positions() {
    const FAR: u32 = 40;
    #[derive(Debug, PartialEq, Encode, Decode)]
    enum Sparse {
        #[codec(tag = FAR)]
        Far(u8),
        #[codec(tag = 3)]
        Near,
    }
    let far = codec::encode_to_vec(&Sparse::Far(7)).unwrap();
    assert_eq!(far, [40, 0, 0, 0, 7]);
    assert_eq!(codec::decode::<Sparse>(&far).unwrap(), Sparse::Far(7));
    assert_eq!(codec::encode_to_vec(&Sparse::Near).unwrap(), [3, 0, 0, 0]);
    assert_eq!(
        codec::decode::<Sparse>(&[3, 0, 0, 0]).unwrap(),
        Sparse::Near
    );
    let unknown = codec::decode::<Sparse>(&[0, 0, 0, 0]).unwrap_err();
    assert!(matches!(
        unknown,
        codec::CodecError::Decode(DecodeError::UnexpectedVariant {
            type_name: "Sparse",
            found: 0,
            max: FAR,
        })
    ));
}
