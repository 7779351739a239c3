//! Messages on the wire: the handshake, the consensus messages between peers, and the client
//! protocol. Each travels as one frame whose body is the enum in `crate::codec`'s format.

use crate::codec::{Decode, Encode};
use crate::entry::Entry;
use crate::ids::{ClientId, EntryIndex, NodeId, RequestNumber, StateHash, Term};

/// The newest version of this protocol, the one a caller offers first; a handshake with a
/// version outside [`PROTOCOL_VERSION_OLDEST`]..=[`PROTOCOL_VERSION`] is refused, and a caller
/// refused by a node of an older build calls again with that node's version when it speaks it
/// too. Version 2: request fragments carry their request's digest, a reused request number is
/// answered [`ClientReply::Reused`], and a client may ask where its session stands
/// ([`ClientRequest::Resume`]). Version 3: client ids are 128 bits, request number 0 with no
/// commands registers a client id through the log, and a request says the client's oldest
/// pending one ([`Submit::oldest_pending`], [`ClientReply::NotYet`]). Version 4: a leader may
/// confirm its leadership for reads with [`PeerMessage::ReadCheck`] rounds; every message of
/// version 3 keeps its bytes. Version 5: a request may carry callers' keys over runs of its
/// commands ([`ClientRequest::SubmitKeyed`]), and a leader logs them in entries of the kind
/// `KeyedCommands`; every message of version 4 keeps its bytes.
pub const PROTOCOL_VERSION: u16 = 5;
/// The oldest version this build still speaks (with callers and listeners of older builds).
pub const PROTOCOL_VERSION_OLDEST: u16 = 3;
/// The first version whose nodes understand [`PeerMessage::ReadCheck`]: a leader sends it
/// only once every other member has shown, by its handshake, that it speaks this version.
pub const PROTOCOL_VERSION_READ_CHECK: u16 = 4;
/// The first version whose nodes decode keyed requests and the entries that log them: a
/// leader refuses a keyed request while a member is known to speak an older one
/// ([`Rejection::OlderMembers`]).
pub const PROTOCOL_VERSION_KEYED: u16 = 5;

/// The tag of every variant of every enum that goes on the wire: the `u32` written before the
/// variant's fields (`notes/protocol.md` lists them with the fields).
///
/// A tag is the variant's name on the wire, so it never changes and is never given to another
/// variant: a new variant takes a number no variant of its enum had, and a variant removed
/// leaves its number unused. They equal the variants' positions in their enums as of protocol
/// version 4, which is what the derive wrote before the tags were explicit, so no byte changed.
pub mod tags {
    /// Tags of [`Admission`](super::Admission): the listener's last word in a handshake.
    pub mod admission {
        /// [`Admission::Accepted`](crate::message::Admission::Accepted).
        pub const ACCEPTED: u32 = 0;
        /// [`Admission::Refused`](crate::message::Admission::Refused).
        pub const REFUSED: u32 = 1;
    }

    /// Tags of [`Refusal`](super::Refusal): why a node closes a connection.
    pub mod refusal {
        /// [`Refusal::Version`](crate::message::Refusal::Version).
        pub const VERSION: u32 = 0;
        /// [`Refusal::WrongCluster`](crate::message::Refusal::WrongCluster).
        pub const WRONG_CLUSTER: u32 = 1;
        /// [`Refusal::NotAPeer`](crate::message::Refusal::NotAPeer).
        pub const NOT_A_PEER: u32 = 2;
        /// [`Refusal::NodeOnClientPort`](crate::message::Refusal::NodeOnClientPort).
        pub const NODE_ON_CLIENT_PORT: u32 = 3;
        /// [`Refusal::Unauthenticated`](crate::message::Refusal::Unauthenticated).
        pub const UNAUTHENTICATED: u32 = 4;
        /// [`Refusal::TooManyConnections`](crate::message::Refusal::TooManyConnections).
        pub const TOO_MANY_CONNECTIONS: u32 = 5;
        /// [`Refusal::HandshakeTimeout`](crate::message::Refusal::HandshakeTimeout).
        pub const HANDSHAKE_TIMEOUT: u32 = 6;
        /// [`Refusal::ReadTimeout`](crate::message::Refusal::ReadTimeout).
        pub const READ_TIMEOUT: u32 = 7;
        /// [`Refusal::IdleTimeout`](crate::message::Refusal::IdleTimeout).
        pub const IDLE_TIMEOUT: u32 = 8;
        /// [`Refusal::EmptyFrame`](crate::message::Refusal::EmptyFrame).
        pub const EMPTY_FRAME: u32 = 9;
        /// [`Refusal::FrameTooLarge`](crate::message::Refusal::FrameTooLarge).
        pub const FRAME_TOO_LARGE: u32 = 10;
        /// [`Refusal::BadCrc`](crate::message::Refusal::BadCrc).
        pub const BAD_CRC: u32 = 11;
        /// [`Refusal::Undecodable`](crate::message::Refusal::Undecodable).
        pub const UNDECODABLE: u32 = 12;
        /// [`Refusal::Forbidden`](crate::message::Refusal::Forbidden).
        pub const FORBIDDEN: u32 = 13;
        /// [`Refusal::WrongCredential`](crate::message::Refusal::WrongCredential).
        pub const WRONG_CREDENTIAL: u32 = 14;
    }

    /// Tags of [`Credential`](super::Credential): whose secret a handshake's proof was made
    /// from.
    pub mod credential {
        /// [`Credential::Peer`](crate::message::Credential::Peer).
        pub const PEER: u32 = 0;
        /// [`Credential::Application`](crate::message::Credential::Application).
        pub const APPLICATION: u32 = 1;
        /// [`Credential::Operator`](crate::message::Credential::Operator).
        pub const OPERATOR: u32 = 2;
    }

    /// Tags of [`ClientRole`](super::ClientRole): what a client connection may ask.
    pub mod client_role {
        /// [`ClientRole::Application`](crate::message::ClientRole::Application).
        pub const APPLICATION: u32 = 0;
        /// [`ClientRole::Operator`](crate::message::ClientRole::Operator).
        pub const OPERATOR: u32 = 1;
    }

    /// Tags of [`PeerMessage`](super::PeerMessage): messages between replicas.
    pub mod peer_message {
        /// [`PeerMessage::Append`](crate::message::PeerMessage::Append).
        pub const APPEND: u32 = 0;
        /// [`PeerMessage::AppendReply`](crate::message::PeerMessage::AppendReply).
        pub const APPEND_REPLY: u32 = 1;
        /// [`PeerMessage::Vote`](crate::message::PeerMessage::Vote).
        pub const VOTE: u32 = 2;
        /// [`PeerMessage::VoteReply`](crate::message::PeerMessage::VoteReply).
        pub const VOTE_REPLY: u32 = 3;
        /// [`PeerMessage::Snapshot`](crate::message::PeerMessage::Snapshot).
        pub const SNAPSHOT: u32 = 4;
        /// [`PeerMessage::LogEnd`](crate::message::PeerMessage::LogEnd).
        pub const LOG_END: u32 = 5;
        /// [`PeerMessage::ReadCheck`](crate::message::PeerMessage::ReadCheck).
        pub const READ_CHECK: u32 = 6;
        /// [`PeerMessage::ReadCheckReply`](crate::message::PeerMessage::ReadCheckReply).
        pub const READ_CHECK_REPLY: u32 = 7;
    }

    /// Tags of [`AppendOutcome`](super::AppendOutcome): what a follower did with an append.
    pub mod append_outcome {
        /// [`AppendOutcome::Matched`](crate::message::AppendOutcome::Matched).
        pub const MATCHED: u32 = 0;
        /// [`AppendOutcome::Conflict`](crate::message::AppendOutcome::Conflict).
        pub const CONFLICT: u32 = 1;
    }

    /// Tags of [`ClientRequest`](super::ClientRequest): what a client asks of a node.
    pub mod client_request {
        /// [`ClientRequest::Submit`](crate::message::ClientRequest::Submit).
        pub const SUBMIT: u32 = 0;
        /// [`ClientRequest::Status`](crate::message::ClientRequest::Status).
        pub const STATUS: u32 = 1;
        /// [`ClientRequest::SetMode`](crate::message::ClientRequest::SetMode).
        pub const SET_MODE: u32 = 2;
        /// [`ClientRequest::Resume`](crate::message::ClientRequest::Resume).
        pub const RESUME: u32 = 3;
        /// [`ClientRequest::Backup`](crate::message::ClientRequest::Backup).
        pub const BACKUP: u32 = 4;
        /// [`ClientRequest::ChangeMembers`](crate::message::ClientRequest::ChangeMembers).
        pub const CHANGE_MEMBERS: u32 = 5;
        /// [`ClientRequest::Upgrade`](crate::message::ClientRequest::Upgrade).
        pub const UPGRADE: u32 = 6;
        /// [`ClientRequest::Versions`](crate::message::ClientRequest::Versions).
        pub const VERSIONS: u32 = 7;
        /// [`ClientRequest::Read`](crate::message::ClientRequest::Read).
        pub const READ: u32 = 8;
        /// [`ClientRequest::Build`](crate::message::ClientRequest::Build).
        pub const BUILD: u32 = 9;
        /// [`ClientRequest::SubmitKeyed`](crate::message::ClientRequest::SubmitKeyed).
        pub const SUBMIT_KEYED: u32 = 10;
        /// [`ClientRequest::Changes`](crate::message::ClientRequest::Changes).
        pub const CHANGES: u32 = 11;
    }

    /// Tags of [`ClientReply`](super::ClientReply): what a node answers a client.
    pub mod client_reply {
        /// [`ClientReply::Results`](crate::message::ClientReply::Results).
        pub const RESULTS: u32 = 0;
        /// [`ClientReply::NotLeader`](crate::message::ClientReply::NotLeader).
        pub const NOT_LEADER: u32 = 1;
        /// [`ClientReply::Rejected`](crate::message::ClientReply::Rejected).
        pub const REJECTED: u32 = 2;
        /// [`ClientReply::Stale`](crate::message::ClientReply::Stale).
        pub const STALE: u32 = 3;
        /// [`ClientReply::Expired`](crate::message::ClientReply::Expired).
        pub const EXPIRED: u32 = 4;
        /// [`ClientReply::Reused`](crate::message::ClientReply::Reused).
        pub const REUSED: u32 = 5;
        /// [`ClientReply::NotYet`](crate::message::ClientReply::NotYet).
        pub const NOT_YET: u32 = 6;
        /// [`ClientReply::Session`](crate::message::ClientReply::Session).
        pub const SESSION: u32 = 7;
        /// [`ClientReply::Status`](crate::message::ClientReply::Status).
        pub const STATUS: u32 = 8;
        /// [`ClientReply::ModeSet`](crate::message::ClientReply::ModeSet).
        pub const MODE_SET: u32 = 9;
        /// [`ClientReply::Refused`](crate::message::ClientReply::Refused).
        pub const REFUSED: u32 = 10;
        /// [`ClientReply::BackupChunk`](crate::message::ClientReply::BackupChunk).
        pub const BACKUP_CHUNK: u32 = 11;
        /// [`ClientReply::NoBackup`](crate::message::ClientReply::NoBackup).
        pub const NO_BACKUP: u32 = 12;
        /// [`ClientReply::MembersChanging`](crate::message::ClientReply::MembersChanging).
        pub const MEMBERS_CHANGING: u32 = 13;
        /// [`ClientReply::MembersRefused`](crate::message::ClientReply::MembersRefused).
        pub const MEMBERS_REFUSED: u32 = 14;
        /// [`ClientReply::Upgrading`](crate::message::ClientReply::Upgrading).
        pub const UPGRADING: u32 = 15;
        /// [`ClientReply::UpgradeRefused`](crate::message::ClientReply::UpgradeRefused).
        pub const UPGRADE_REFUSED: u32 = 16;
        /// [`ClientReply::Versions`](crate::message::ClientReply::Versions).
        pub const VERSIONS: u32 = 17;
        /// [`ClientReply::ReadResults`](crate::message::ClientReply::ReadResults).
        pub const READ_RESULTS: u32 = 18;
        /// [`ClientReply::Build`](crate::message::ClientReply::Build).
        pub const BUILD: u32 = 19;
        /// [`ClientReply::Changes`](crate::message::ClientReply::Changes).
        pub const CHANGES: u32 = 20;
        /// [`ClientReply::NoChanges`](crate::message::ClientReply::NoChanges).
        pub const NO_CHANGES: u32 = 21;
    }

    /// Tags of [`ChangesRefusal`](super::ChangesRefusal): why a node serves no changes from a
    /// position.
    pub mod changes_refusal {
        /// [`ChangesRefusal::Gone`](crate::message::ChangesRefusal::Gone).
        pub const GONE: u32 = 0;
        /// [`ChangesRefusal::Missing`](crate::message::ChangesRefusal::Missing).
        pub const MISSING: u32 = 1;
        /// [`ChangesRefusal::Unreadable`](crate::message::ChangesRefusal::Unreadable).
        pub const UNREADABLE: u32 = 2;
        /// [`ChangesRefusal::Off`](crate::message::ChangesRefusal::Off).
        pub const OFF: u32 = 3;
    }

    /// Tags of [`Rejection`](super::Rejection): why a node refused a request without applying it.
    pub mod rejection {
        /// [`Rejection::Empty`](crate::message::Rejection::Empty).
        pub const EMPTY: u32 = 0;
        /// [`Rejection::TooManyCommands`](crate::message::Rejection::TooManyCommands).
        pub const TOO_MANY_COMMANDS: u32 = 1;
        /// [`Rejection::Malformed`](crate::message::Rejection::Malformed).
        pub const MALFORMED: u32 = 2;
        /// [`Rejection::Halted`](crate::message::Rejection::Halted).
        pub const HALTED: u32 = 3;
        /// [`Rejection::Busy`](crate::message::Rejection::Busy).
        pub const BUSY: u32 = 4;
        /// [`Rejection::StorageFull`](crate::message::Rejection::StorageFull).
        pub const STORAGE_FULL: u32 = 5;
        /// [`Rejection::NotReadOnly`](crate::message::Rejection::NotReadOnly).
        pub const NOT_READ_ONLY: u32 = 6;
        /// [`Rejection::OlderMembers`](crate::message::Rejection::OlderMembers).
        pub const OLDER_MEMBERS: u32 = 7;
    }

    /// Tags of [`Mode`](super::Mode): the execution mode of a leader.
    pub mod mode {
        /// [`Mode::Verify`](crate::message::Mode::Verify).
        pub const VERIFY: u32 = 0;
        /// [`Mode::Performance`](crate::message::Mode::Performance).
        pub const PERFORMANCE: u32 = 1;
    }

    /// Tags of [`Role`](super::Role): a replica's role.
    pub mod role {
        /// [`Role::Follower`](crate::message::Role::Follower).
        pub const FOLLOWER: u32 = 0;
        /// [`Role::Candidate`](crate::message::Role::Candidate).
        pub const CANDIDATE: u32 = 1;
        /// [`Role::Leader`](crate::message::Role::Leader).
        pub const LEADER: u32 = 2;
    }

    /// Tags of [`MemberChange`](super::MemberChange): a change of one member.
    pub mod member_change {
        /// [`MemberChange::Add`](crate::message::MemberChange::Add).
        pub const ADD: u32 = 0;
        /// [`MemberChange::Remove`](crate::message::MemberChange::Remove).
        pub const REMOVE: u32 = 1;
    }

    /// Tags of [`MembersRefusal`](super::MembersRefusal): why a change of members was refused.
    pub mod members_refusal {
        /// [`MembersRefusal::Pending`](crate::message::MembersRefusal::Pending).
        pub const PENDING: u32 = 0;
        /// [`MembersRefusal::NotSettled`](crate::message::MembersRefusal::NotSettled).
        pub const NOT_SETTLED: u32 = 1;
        /// [`MembersRefusal::Invalid`](crate::message::MembersRefusal::Invalid).
        pub const INVALID: u32 = 2;
    }

    /// Tags of [`UpgradeRefusal`](super::UpgradeRefusal): why a handler upgrade was refused.
    pub mod upgrade_refusal {
        /// [`UpgradeRefusal::Unsupported`](crate::message::UpgradeRefusal::Unsupported).
        pub const UNSUPPORTED: u32 = 0;
        /// [`UpgradeRefusal::NotNewer`](crate::message::UpgradeRefusal::NotNewer).
        pub const NOT_NEWER: u32 = 1;
        /// [`UpgradeRefusal::Halted`](crate::message::UpgradeRefusal::Halted).
        pub const HALTED: u32 = 2;
    }
}

/// The first frame on every connection: who is calling.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Hello {
    /// The protocol version the caller speaks on this connection (its newest, or the
    /// listener's after a refusal that named it).
    pub version: u16,
    /// The cluster the caller belongs to.
    pub cluster: u64,
    /// The calling node, or `None` for a client.
    pub node: Option<NodeId>,
}

/// The listener's answer to a [`Hello`]: prove you hold the key, for this nonce.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Challenge {
    /// Fresh random bytes, never used for another connection.
    pub nonce: [u8; crate::auth::NONCE_BYTES],
}

/// The caller's answer to a [`Challenge`]: a blake3 keyed MAC (see [`crate::auth`]).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Proof {
    /// The MAC, or zeros from a client of a cluster that asks none.
    pub mac: [u8; crate::auth::MAC_BYTES],
}

/// The listener's last word in a handshake.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum Admission {
    /// The connection may carry messages.
    #[codec(tag = tags::admission::ACCEPTED)]
    Accepted,
    /// The connection is refused, and closes.
    #[codec(tag = tags::admission::REFUSED)]
    Refused(Refusal),
}

/// Why a node closes a connection. It says so in one frame (its own cluster's) where it can,
/// then closes; nothing the connection sent reached the log.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, thiserror::Error)]
#[codec(crate = "crate::codec")]
#[non_exhaustive]
pub enum Refusal {
    /// Another protocol version.
    #[error("protocol version {theirs}, this node speaks {ours}")]
    #[codec(tag = tags::refusal::VERSION)]
    Version {
        /// The caller's version.
        theirs: u16,
        /// This node's version.
        ours: u16,
    },
    /// Another cluster.
    #[error("cluster {theirs}, this node belongs to cluster {ours}")]
    #[codec(tag = tags::refusal::WRONG_CLUSTER)]
    WrongCluster {
        /// The caller's cluster.
        theirs: u64,
        /// This node's cluster.
        ours: u64,
    },
    /// The peer port takes only this cluster's nodes.
    #[error("not a node of this cluster: {caller:?}")]
    #[codec(tag = tags::refusal::NOT_A_PEER)]
    NotAPeer {
        /// Who the caller said it was.
        caller: Option<NodeId>,
    },
    /// The client port takes only clients.
    #[error("a node on the client port")]
    #[codec(tag = tags::refusal::NODE_ON_CLIENT_PORT)]
    NodeOnClientPort,
    /// The proof did not match the challenge with any key of this cluster (nor any other
    /// secret it knows: see [`Refusal::WrongCredential`]).
    #[error(
        "the key proves no role of this cluster (the handshake proof matches none of its keys)"
    )]
    #[codec(tag = tags::refusal::UNAUTHENTICATED)]
    Unauthenticated,
    /// The node holds as many connections of this kind as it takes.
    #[error("too many connections (the limit is {limit})")]
    #[codec(tag = tags::refusal::TOO_MANY_CONNECTIONS)]
    TooManyConnections {
        /// The limit.
        limit: u32,
    },
    /// The handshake did not finish in time.
    #[error("no handshake in time")]
    #[codec(tag = tags::refusal::HANDSHAKE_TIMEOUT)]
    HandshakeTimeout,
    /// A frame started but did not finish in time.
    #[error("a frame did not finish in time")]
    #[codec(tag = tags::refusal::READ_TIMEOUT)]
    ReadTimeout,
    /// Nothing arrived for too long.
    #[error("idle for too long")]
    #[codec(tag = tags::refusal::IDLE_TIMEOUT)]
    IdleTimeout,
    /// A frame of length zero.
    #[error("empty frame")]
    #[codec(tag = tags::refusal::EMPTY_FRAME)]
    EmptyFrame,
    /// A frame longer than this port takes.
    #[error("frame of {bytes} bytes is over the limit of {limit}")]
    #[codec(tag = tags::refusal::FRAME_TOO_LARGE)]
    FrameTooLarge {
        /// Bytes the frame claimed.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A frame whose crc32 does not match.
    #[error("frame crc32 mismatch")]
    #[codec(tag = tags::refusal::BAD_CRC)]
    BadCrc,
    /// A frame whose body is not a message of this protocol (or not the one expected here).
    #[error("not a message of this protocol")]
    #[codec(tag = tags::refusal::UNDECODABLE)]
    Undecodable,
    /// A request the connection's role may not make: operator requests need the operator
    /// credential, business requests the client credential (added after the protocol's
    /// fourth version; every earlier message keeps its bytes).
    #[error("{}", forbidden(*.role))]
    #[codec(tag = tags::refusal::FORBIDDEN)]
    Forbidden {
        /// The role the connection's handshake proved.
        role: ClientRole,
    },
    /// A handshake whose proof is another role's secret made into the credential a request
    /// needs (a cluster file whose operator secret is the client secret, say): refused in the
    /// handshake, naming both, where [`Refusal::Unauthenticated`] would say only that the key
    /// matches none. Added after [`Refusal::Forbidden`], within the protocol's fourth version:
    /// every earlier message keeps its bytes, and a node sends it only for a proof no build
    /// before it admitted as anything but an application (see `notes/decisions/access.md`).
    #[error("this key is {proved}; {}", needs_text(*.needs))]
    #[codec(tag = tags::refusal::WRONG_CREDENTIAL)]
    WrongCredential {
        /// Whose secret the key was made from.
        proved: Credential,
        /// The role the caller asked for.
        needs: ClientRole,
    },
}

/// Whose secret a handshake's proof was made from, as a node recognizes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum Credential {
    /// The nodes' (peer) secret.
    #[codec(tag = tags::credential::PEER)]
    Peer,
    /// The applications' (client) secret.
    #[codec(tag = tags::credential::APPLICATION)]
    Application,
    /// The operators' secret.
    #[codec(tag = tags::credential::OPERATOR)]
    Operator,
}

impl std::fmt::Display for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::Peer => "the nodes' (peer) credential",
            Credential::Application => "the application (client) credential",
            Credential::Operator => "the operator credential",
        })
    }
}

/// What the requests of `role` need, for a refusal's message.
fn needs_text(role: ClientRole) -> &'static str {
    match role {
        ClientRole::Operator => "mode, member, backup and upgrade need the operator credential",
        ClientRole::Application => {
            "business commands (submit, read) need the application (client) credential"
        }
    }
}

/// The message of [`Refusal::Forbidden`]: what the connection's key is, and what the request
/// needs (an application connection is refused only operator requests, an operator
/// connection only business requests).
fn forbidden(role: ClientRole) -> &'static str {
    match role {
        ClientRole::Application => {
            "this key is not the operator credential (the node took it for an application's: \
             the client credential, or any key where the cluster sets no client_secret); mode, \
             member, backup and upgrade need the operator credential"
        }
        ClientRole::Operator => {
            "this key is the operator credential: the operator credential may not submit or \
             read business commands, which need the application (client) credential"
        }
    }
}

/// What a client connection may ask, by the credential its handshake proved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum ClientRole {
    /// The client secret (or no proof, where the cluster sets no client secret): business
    /// requests (submit, read, resume) and the node's status and versions.
    #[codec(tag = tags::client_role::APPLICATION)]
    Application,
    /// The operator credential: mode, membership, handler upgrades, backups, and the node's
    /// status and versions; never a business request.
    #[codec(tag = tags::client_role::OPERATOR)]
    Operator,
}

impl ClientRequest {
    /// The request's kind, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ClientRequest::Submit(_) => "submit",
            ClientRequest::Status => "status",
            ClientRequest::SetMode(_) => "set mode",
            ClientRequest::Resume(_) => "resume",
            ClientRequest::Backup(_) => "backup",
            ClientRequest::ChangeMembers(_) => "change members",
            ClientRequest::Upgrade(_) => "upgrade",
            ClientRequest::Versions => "versions",
            ClientRequest::Read(_) => "read",
            ClientRequest::Build => "build",
            ClientRequest::SubmitKeyed(_) => "submit keyed",
            ClientRequest::Changes(_) => "changes",
        }
    }
}

impl ClientRole {
    /// True when a connection of this role may make `request`.
    pub fn permits(self, request: &ClientRequest) -> bool {
        match request {
            ClientRequest::Status
            | ClientRequest::Versions
            | ClientRequest::Build
            | ClientRequest::Changes(_) => true,
            ClientRequest::Submit(_)
            | ClientRequest::SubmitKeyed(_)
            | ClientRequest::Read(_)
            | ClientRequest::Resume(_) => self == ClientRole::Application,
            ClientRequest::SetMode(_)
            | ClientRequest::Backup(_)
            | ClientRequest::ChangeMembers(_)
            | ClientRequest::Upgrade(_) => self == ClientRole::Operator,
        }
    }
}

impl std::fmt::Display for ClientRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientRole::Application => "application",
            ClientRole::Operator => "operator",
        })
    }
}

impl Refusal {
    /// The refusal's kind as a short name that does not change (`wrong_cluster`,
    /// `bad_crc`): the label a node's metrics count refused connections by.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Version { .. } => "version",
            Refusal::WrongCluster { .. } => "wrong_cluster",
            Refusal::NotAPeer { .. } => "not_a_peer",
            Refusal::NodeOnClientPort => "node_on_client_port",
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::Forbidden { .. } => "forbidden",
            Refusal::WrongCredential { .. } => "wrong_credential",
            Refusal::TooManyConnections { .. } => "too_many_connections",
            Refusal::HandshakeTimeout => "handshake_timeout",
            Refusal::ReadTimeout => "read_timeout",
            Refusal::IdleTimeout => "idle_timeout",
            Refusal::EmptyFrame => "empty_frame",
            Refusal::FrameTooLarge { .. } => "frame_too_large",
            Refusal::BadCrc => "bad_crc",
            Refusal::Undecodable => "undecodable",
        }
    }

    /// The refusal a frame error earns, if the connection can still hear one.
    pub fn for_frame(error: &crate::frame::FrameError) -> Option<Refusal> {
        use crate::frame::FrameError;
        match error {
            FrameError::Io(_) | FrameError::Encode(_) => None,
            FrameError::Empty => Some(Refusal::EmptyFrame),
            FrameError::TooLarge { bytes, limit } => Some(Refusal::FrameTooLarge {
                bytes: *bytes as u64,
                limit: *limit as u64,
            }),
            FrameError::WrongCluster { theirs, ours } => Some(Refusal::WrongCluster {
                theirs: *theirs,
                ours: *ours,
            }),
            FrameError::BadCrc => Some(Refusal::BadCrc),
        }
    }

    /// True when trying again, here or elsewhere, cannot help: the caller is of another
    /// cluster, version or key, or is not what this port takes.
    pub fn is_permanent(&self) -> bool {
        match self {
            Refusal::Version { .. }
            | Refusal::WrongCluster { .. }
            | Refusal::NotAPeer { .. }
            | Refusal::NodeOnClientPort
            | Refusal::Unauthenticated
            | Refusal::Forbidden { .. }
            | Refusal::WrongCredential { .. } => true,
            Refusal::TooManyConnections { .. }
            | Refusal::HandshakeTimeout
            | Refusal::ReadTimeout
            | Refusal::IdleTimeout
            | Refusal::EmptyFrame
            | Refusal::FrameTooLarge { .. }
            | Refusal::BadCrc
            | Refusal::Undecodable => false,
        }
    }
}

/// What a leader does with its simulation of an entry once the entry commits. Followers
/// always execute; both modes simulate on the leader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum Mode {
    /// Execute every command again and compare its result and writes with the simulation; a
    /// difference stops the node.
    #[default]
    #[codec(tag = tags::mode::VERIFY)]
    Verify,
    /// Reuse the simulation of an entry when the committed entry is the one simulated (same
    /// index and hash) and was simulated on the committed state before it (the leader's
    /// simulations run in log order on top of the committed state, and are discarded when
    /// its leadership ends); execute any other committed entry. No read sets are compared.
    #[codec(tag = tags::mode::PERFORMANCE)]
    Performance,
}

impl Mode {
    /// Both modes, in the order `status` and the benchmarks list them.
    pub const ALL: [Mode; 2] = [Mode::Verify, Mode::Performance];

    /// The mode's name as the cluster file, the mode file, `status` and `--mode` spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Verify => "verify",
            Mode::Performance => "performance",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A mode's name that is neither `verify` nor `performance`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode {0:?}: the modes are \"verify\" and \"performance\"")]
pub struct UnknownMode(pub String);

impl std::str::FromStr for Mode {
    type Err = UnknownMode;

    /// Reads a mode's [`Mode::name`], exactly (no other spelling: it is a file key too).
    fn from_str(text: &str) -> Result<Mode, UnknownMode> {
        Mode::ALL
            .into_iter()
            .find(|mode| mode.name() == text)
            .ok_or_else(|| UnknownMode(text.to_string()))
    }
}

/// A replica's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum Role {
    /// Follows a leader (or waits for one).
    #[codec(tag = tags::role::FOLLOWER)]
    Follower,
    /// Asks for votes.
    #[codec(tag = tags::role::CANDIDATE)]
    Candidate,
    /// Leads its term.
    #[codec(tag = tags::role::LEADER)]
    Leader,
}

/// A replica's state hash after applying an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct AppliedHash {
    /// The entry.
    pub index: EntryIndex,
    /// The state hash after it.
    pub hash: StateHash,
}

/// Messages between replicas.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum PeerMessage {
    /// Leader to follower: entries to append (none for a heartbeat).
    #[codec(tag = tags::peer_message::APPEND)]
    Append(Append),
    /// Follower to leader: what it now durably holds.
    #[codec(tag = tags::peer_message::APPEND_REPLY)]
    AppendReply(AppendReply),
    /// Candidate to replica: a vote request.
    #[codec(tag = tags::peer_message::VOTE)]
    Vote(Vote),
    /// Replica to candidate: the vote.
    #[codec(tag = tags::peer_message::VOTE_REPLY)]
    VoteReply(VoteReply),
    /// Leader to follower: a piece of a snapshot, for a follower that needs entries the
    /// leader's log no longer holds.
    #[codec(tag = tags::peer_message::SNAPSHOT)]
    Snapshot(SnapshotChunk),
    /// Replica to replica: where the sender's log ends. A replica repairing damage asks the
    /// replicas that may hold what it lost, whether or not they campaign, and each answers
    /// (added after the protocol's third version; every earlier message keeps its bytes).
    #[codec(tag = tags::peer_message::LOG_END)]
    LogEnd(LogEnd),
    /// Leader to follower: does the receiver still take this leader's term? Sent only to
    /// nodes that speak [`PROTOCOL_VERSION_READ_CHECK`].
    #[codec(tag = tags::peer_message::READ_CHECK)]
    ReadCheck(ReadCheck),
    /// Follower to leader: its answer to a [`ReadCheck`].
    #[codec(tag = tags::peer_message::READ_CHECK_REPLY)]
    ReadCheckReply(ReadCheckReply),
}

/// A leader's round of confirmation for reads off the log: a majority that answers a round
/// in the leader's term shows that no newer leader had been elected when the round began.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct ReadCheck {
    /// The leader's term.
    pub term: Term,
    /// The leader.
    pub leader: NodeId,
    /// The round, counted by the leader.
    pub round: u64,
}

/// The answer to a [`ReadCheck`], with the answering node's term (after taking the leader's,
/// if it was newer): a higher one deposes the leader, the leader's own confirms the round.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct ReadCheckReply {
    /// The answering node's term.
    pub term: Term,
    /// The answering node.
    pub from: NodeId,
    /// The round answered.
    pub round: u64,
}

/// Where a replica's log ends, asked by a replica repairing damage or answered to one.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct LogEnd {
    /// The sender's term (it changes nothing where it arrives).
    pub term: Term,
    /// The sender.
    pub from: NodeId,
    /// Its last log index.
    pub last_index: EntryIndex,
    /// The term of that entry.
    pub last_term: Term,
    /// True when the sender asks for the receiver's log end in return.
    pub ask: bool,
}

/// A piece of a snapshot file, sent in order; the follower installs the snapshot once it has
/// every byte and the digest verifies, then acknowledges its index with an `AppendReply`.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct SnapshotChunk {
    /// The leader's term.
    pub term: Term,
    /// The leader.
    pub leader: NodeId,
    /// The last entry the snapshot covers.
    pub index: EntryIndex,
    /// Where in the file this piece starts.
    pub offset: u64,
    /// The file's size.
    pub total: u64,
    /// The bytes.
    pub data: Vec<u8>,
}

/// Entries to append after `prev_index`, with the leader's commit index.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Append {
    /// The leader's term.
    pub term: Term,
    /// The leader.
    pub leader: NodeId,
    /// The index just before `entries`.
    pub prev_index: EntryIndex,
    /// The term of the entry at `prev_index`.
    pub prev_term: Term,
    /// Entries from `prev_index + 1` on.
    pub entries: Vec<Entry>,
    /// The leader's commit index.
    pub commit: EntryIndex,
    /// The leader's latest applied state hash, for divergence checks.
    pub applied: Option<AppliedHash>,
}

/// What a follower did with an [`Append`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum AppendOutcome {
    /// The follower's log matches the leader's up to `index`, durably.
    #[codec(tag = tags::append_outcome::MATCHED)]
    Matched {
        /// The last index known to match, and fsynced.
        index: EntryIndex,
    },
    /// The entry before the append did not match; retry from `hint + 1`.
    #[codec(tag = tags::append_outcome::CONFLICT)]
    Conflict {
        /// An index at or below which the logs may still match.
        hint: EntryIndex,
    },
}

/// A follower's answer to an [`Append`].
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct AppendReply {
    /// The follower's term.
    pub term: Term,
    /// The follower.
    pub from: NodeId,
    /// What it did.
    pub outcome: AppendOutcome,
    /// The follower's latest applied state hash, for divergence checks.
    pub applied: Option<AppliedHash>,
}

/// A candidate's vote request.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Vote {
    /// The candidate's term (for a pre-vote, the term it would campaign in).
    pub term: Term,
    /// A pre-vote: would the replica vote for this candidate in `term`? Nothing changes on
    /// the replica that answers (no term taken, no vote cast), so a replica that cannot win
    /// does not raise the cluster's term.
    pub pre: bool,
    /// The candidate.
    pub candidate: NodeId,
    /// The candidate's last log index.
    pub last_index: EntryIndex,
    /// The term of that entry.
    pub last_term: Term,
}

/// A vote.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct VoteReply {
    /// The voter's term.
    pub term: Term,
    /// The answer to a pre-vote.
    pub pre: bool,
    /// The voter.
    pub from: NodeId,
    /// True when the vote is granted.
    pub granted: bool,
}

/// What a client asks of a node.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum ClientRequest {
    /// Apply a request of commands, exactly once.
    #[codec(tag = tags::client_request::SUBMIT)]
    Submit(Submit),
    /// Report the node's status.
    #[codec(tag = tags::client_request::STATUS)]
    Status,
    /// Set the execution mode this node uses whenever it leads (operators set it on every node).
    #[codec(tag = tags::client_request::SET_MODE)]
    SetMode(Mode),
    /// Where a client's session stands (a client restarted with its id asks before its first
    /// request): answered by the leader once it has applied everything committed before.
    #[codec(tag = tags::client_request::RESUME)]
    Resume(ClientId),
    /// A piece of the node's newest durable snapshot, for a backup (added after the
    /// protocol's third version; every earlier message keeps its bytes).
    #[codec(tag = tags::client_request::BACKUP)]
    Backup(BackupRequest),
    /// Change the cluster's members by one node (an operator's command, to the leader).
    #[codec(tag = tags::client_request::CHANGE_MEMBERS)]
    ChangeMembers(MemberChange),
    /// Put this handler version in force from an entry of the log (an operator's command, to
    /// the leader).
    #[codec(tag = tags::client_request::UPGRADE)]
    Upgrade(u32),
    /// Which handler versions the node runs, and which is in force on it.
    #[codec(tag = tags::client_request::VERSIONS)]
    Versions,
    /// Run commands the handler marks read-only and answer them without a log entry, as
    /// linearizable as a logged request (added after the protocol's third version; every
    /// earlier message keeps its bytes).
    #[codec(tag = tags::client_request::READ)]
    Read(Read),
    /// Which build the node runs (added within the fourth version: a node of an older build
    /// cannot decode it, answers `Refused(Undecodable)` and closes).
    #[codec(tag = tags::client_request::BUILD)]
    Build,
    /// A request some of whose commands carry their callers' keys (added in the fifth
    /// version): applied exactly once as a request, and each keyed run of commands exactly
    /// once per key, whichever request carries it.
    #[codec(tag = tags::client_request::SUBMIT_KEYED)]
    SubmitKeyed(SubmitKeyed),
    /// The committed commands and their outcomes from a position of the change stream on, as
    /// this node applied them (added within the fifth version: a node of an older build
    /// answers `Refused(Undecodable)` and closes). Any node answers; followers are asked
    /// first, so that the leader's path is untouched.
    #[codec(tag = tags::client_request::CHANGES)]
    Changes(ChangesRequest),
}

/// A place in the change stream: an entry of the log, and a command's position in it
/// (counted over the entry's requests). Commands are streamed in the one global order of
/// (entry, position).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct ChangePosition {
    /// The entry.
    pub index: EntryIndex,
    /// The command's position in it.
    pub position: u32,
}

/// What a change stream's reader asks a node for.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct ChangesRequest {
    /// The first change wanted: the entry, and the first position in it.
    pub from: ChangePosition,
    /// Most bytes of changes in the answer (a node answers at least one entry it holds).
    pub bytes_max: u32,
    /// Milliseconds the node may hold the request while it has applied nothing at or past
    /// `from` yet (0: answer at once, with no entry).
    pub wait_ms: u32,
}

/// Changes a node holds, from the position asked for.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct ChangeBatch {
    /// The node that answered.
    pub node: NodeId,
    /// Entries with changes (or with a handler version of their own), in order; each one's
    /// changes start at the position asked for when it is the entry asked for.
    pub entries: Vec<ChangeEntry>,
    /// Where to ask next: the entry after the last one this answer covers.
    pub next: ChangePosition,
    /// The node's last applied entry when it answered (how far behind the reader is).
    pub applied: EntryIndex,
}

/// One entry's changes.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct ChangeEntry {
    /// The entry.
    pub index: EntryIndex,
    /// The handler version in force after it.
    pub version: u32,
    /// The commands that ran, each `position u32 | command length u32 | command | outcome
    /// length u32 | outcome` (little-endian), by position.
    pub changes: Vec<u8>,
}

/// Why a node serves no changes from a position.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, thiserror::Error)]
#[codec(crate = "crate::codec")]
#[non_exhaustive]
pub enum ChangesRefusal {
    /// The position is older than what this node keeps (its log was compacted past it, or it
    /// started from a snapshot after it): `oldest` is the oldest it serves.
    #[error("node {node} no longer holds entry {asked}: the oldest it serves is entry {oldest}")]
    #[codec(tag = tags::changes_refusal::GONE)]
    Gone {
        /// The node.
        node: NodeId,
        /// The entry asked for.
        asked: EntryIndex,
        /// The oldest entry it serves.
        oldest: EntryIndex,
    },
    /// The node applied these entries without keeping their changes (it led the cluster then,
    /// installed a snapshot over them, or its journal was off); another node may hold them.
    #[error(
        "node {node} holds no changes of entries {from} to {to} (it led then, or skipped them \
         with a snapshot): ask another node"
    )]
    #[codec(tag = tags::changes_refusal::MISSING)]
    Missing {
        /// The node.
        node: NodeId,
        /// The first entry missing.
        from: EntryIndex,
        /// The last entry missing.
        to: EntryIndex,
    },
    /// The node could not read what it keeps: why.
    #[error("node {node} could not read its changes: {reason}")]
    #[codec(tag = tags::changes_refusal::UNREADABLE)]
    Unreadable {
        /// The node.
        node: NodeId,
        /// Why, as the node says.
        reason: String,
    },
    /// The cluster keeps no changes (`change_stream = false` in its cluster file).
    #[error("node {node} keeps no changes: the cluster file sets change_stream = false")]
    #[codec(tag = tags::changes_refusal::OFF)]
    Off {
        /// The node.
        node: NodeId,
    },
}

/// A request whose runs of commands carry keys: each run is applied at most once per key,
/// across requests, clients and gateways, as the request 1 of the key's own session would be.
/// A run whose key was used before with the same commands is answered with the outcomes it
/// had; with other commands, or after the cluster forgot the key, it does not run and its
/// commands are answered so (`notes/protocol.md`, keyed outcomes).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct SubmitKeyed {
    /// The request, as an unkeyed one would be sent.
    pub submit: Submit,
    /// The keyed runs of its commands, in order, apart, each within the request.
    pub runs: Vec<KeyRun>,
}

/// A run of consecutive commands of a request that one caller's key covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct KeyRun {
    /// The key's session: an id derived from the caller's key, the same at every caller.
    pub key: ClientId,
    /// Position in the request of the run's first command.
    pub first: u32,
    /// Commands in the run (at least one).
    pub count: u32,
}

impl KeyRun {
    /// One past the position of the run's last command.
    pub fn end(&self) -> u32 {
        self.first + self.count
    }
}

/// A request of read-only commands, answered off the log by the leader: it has no request
/// number and no session, since running it again is harmless.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Read {
    /// The client.
    pub client: ClientId,
    /// The client's count of its reads: a retry of a read the leader still holds (same
    /// client, same count) is answered with it, on the newest connection, and is not run
    /// again, so that retries sooner than a commit do not each start over.
    pub read: u64,
    /// Commands in `commands`.
    pub command_count: u32,
    /// The encoded commands.
    pub commands: Vec<u8>,
}

/// Which piece of a snapshot file a backup asks for: the first piece of the newest durable
/// snapshot (`index` `None`, `offset` 0), then the next pieces of the same one, one at a time.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct BackupRequest {
    /// The snapshot (the entry it covers), or `None` for the newest durable one.
    pub index: Option<EntryIndex>,
    /// Where in its file the piece starts.
    pub offset: u64,
}

/// A piece of a durable snapshot file, the answer to a [`BackupRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct BackupChunk {
    /// The node that answered.
    pub node: NodeId,
    /// The last entry the snapshot covers.
    pub index: EntryIndex,
    /// The execution mode the node runs (it comes along with the state).
    pub mode: Mode,
    /// Where in the file this piece starts.
    pub offset: u64,
    /// The file's size.
    pub total: u64,
    /// The bytes.
    pub data: Vec<u8>,
}

/// One member of a cluster: its id and where the others and clients reach it, as written in
/// its cluster file (`host:port` or a numeric address).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Member {
    /// The node.
    pub id: NodeId,
    /// Where the other nodes connect to it (empty: as the cluster file says).
    pub peer_address: String,
    /// Where clients connect to it (empty: as the cluster file says).
    pub client_address: String,
}

/// Why a leader refused a change of members.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, thiserror::Error)]
#[codec(crate = "crate::codec")]
#[non_exhaustive]
pub enum MembersRefusal {
    /// An earlier change is not committed yet (ask again shortly).
    #[error("an earlier change of members is not committed yet")]
    #[codec(tag = tags::members_refusal::PENDING)]
    Pending,
    /// The leader has not committed an entry of its own term yet (ask again shortly).
    #[error("the leader has not committed an entry of its term yet")]
    #[codec(tag = tags::members_refusal::NOT_SETTLED)]
    NotSettled,
    /// The change itself is wrong (a node already a member, or not one, the last member, too
    /// many members, an empty address): the reason.
    #[error("{0}")]
    #[codec(tag = tags::members_refusal::INVALID)]
    Invalid(String),
}

/// A change of one node of a cluster's members.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum MemberChange {
    /// A node joins (it runs already, started to join).
    #[codec(tag = tags::member_change::ADD)]
    Add(Member),
    /// A node leaves.
    #[codec(tag = tags::member_change::REMOVE)]
    Remove(NodeId),
}

/// One client request: 1 to 1,024 commands, encoded back to back; or, as request number 0 with
/// no commands, the registration of the client id (a session opened through the log).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Submit {
    /// The client.
    pub client: ClientId,
    /// The client's request number: one more than its last request (0: the registration).
    pub request: RequestNumber,
    /// The client's oldest request still unanswered when it sent this one (this one's number
    /// for a client with one request in flight): the request runs only after every request
    /// of the client from this number on before it, so pipelined requests apply in order.
    pub oldest_pending: RequestNumber,
    /// Commands in `commands`.
    pub command_count: u32,
    /// The encoded commands.
    pub commands: Vec<u8>,
}

/// Why a node refused a request without applying it. Nothing of it entered the log.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum Rejection {
    /// A request with no commands (other than a registration, request number 0).
    #[codec(tag = tags::rejection::EMPTY)]
    Empty,
    /// More commands than a request may carry.
    #[codec(tag = tags::rejection::TOO_MANY_COMMANDS)]
    TooManyCommands {
        /// Commands in the request.
        count: u32,
    },
    /// A command that does not decode as one of this cluster's commands.
    #[codec(tag = tags::rejection::MALFORMED)]
    Malformed {
        /// Its position in the request.
        command: u32,
    },
    /// The node stopped applying (divergence or a fault) and takes no requests.
    #[codec(tag = tags::rejection::HALTED)]
    Halted,
    /// The leader's queue of waiting commands is full; retry shortly.
    #[codec(tag = tags::rejection::BUSY)]
    Busy,
    /// The leader's disk is full: it takes no new request until space returns (nothing of
    /// this request was logged).
    #[codec(tag = tags::rejection::STORAGE_FULL)]
    StorageFull,
    /// A read holds a command the handler does not mark read-only (send it as a request).
    #[codec(tag = tags::rejection::NOT_READ_ONLY)]
    NotReadOnly {
        /// Its position in the read.
        command: u32,
    },
    /// A keyed request reached a leader one of whose members is known to speak a protocol
    /// before [`PROTOCOL_VERSION_KEYED`]: keyed commands wait until every node runs a build
    /// that logs them (nothing of this request was logged).
    #[codec(tag = tags::rejection::OLDER_MEMBERS)]
    OlderMembers,
}

/// What a node answers.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum ClientReply {
    /// The request applied (now or before): each command's outcome, encoded back to back.
    #[codec(tag = tags::client_reply::RESULTS)]
    Results {
        /// The client.
        client: ClientId,
        /// The request.
        request: RequestNumber,
        /// Outcomes in `results`.
        command_count: u32,
        /// The encoded outcomes.
        results: Vec<u8>,
    },
    /// This node is not the leader; try the leader, if known.
    #[codec(tag = tags::client_reply::NOT_LEADER)]
    NotLeader {
        /// The leader, if known.
        leader: Option<NodeId>,
        /// The leader's client address, if known.
        address: Option<String>,
    },
    /// The request was refused.
    #[codec(tag = tags::client_reply::REJECTED)]
    Rejected {
        /// The request.
        request: RequestNumber,
        /// Why.
        reason: Rejection,
    },
    /// The client has since sent a newer request; this one will not be applied.
    #[codec(tag = tags::client_reply::STALE)]
    Stale {
        /// The request.
        request: RequestNumber,
    },
    /// The cluster keeps no session for this client (evicted, or it did not start at request
    /// 1): this request was not applied now; whether an earlier attempt was is not known.
    #[codec(tag = tags::client_reply::EXPIRED)]
    Expired {
        /// The request.
        request: RequestNumber,
    },
    /// The request's number is the client's latest, but that request had other commands:
    /// these were not applied (a client id used again, or numbers given out twice).
    #[codec(tag = tags::client_reply::REUSED)]
    Reused {
        /// The request.
        request: RequestNumber,
    },
    /// An earlier request of the client that it still waits for (from its oldest pending on)
    /// has not run yet: this one was not applied, so that the client's requests apply in
    /// order; send it again.
    #[codec(tag = tags::client_reply::NOT_YET)]
    NotYet {
        /// The request.
        request: RequestNumber,
    },
    /// Where the client's session stands, as committed: the number its next request takes
    /// (1 for a client the cluster has no session of), or that the session expired.
    #[codec(tag = tags::client_reply::SESSION)]
    Session {
        /// The client.
        client: ClientId,
        /// The number of its next request.
        next_request: RequestNumber,
        /// The session was evicted: the id cannot go on (see [`ClientReply::Expired`]).
        expired: bool,
    },
    /// The node's status.
    #[codec(tag = tags::client_reply::STATUS)]
    Status(Box<NodeStatus>),
    /// The mode is set.
    #[codec(tag = tags::client_reply::MODE_SET)]
    ModeSet(Mode),
    /// The connection broke the protocol and closes; nothing of what it sent after its last
    /// answered request was applied.
    #[codec(tag = tags::client_reply::REFUSED)]
    Refused(Refusal),
    /// A piece of a durable snapshot, for a backup.
    #[codec(tag = tags::client_reply::BACKUP_CHUNK)]
    BackupChunk(BackupChunk),
    /// The node has no such snapshot (none durable yet, or the one asked for was replaced):
    /// a backup starts again from the newest.
    #[codec(tag = tags::client_reply::NO_BACKUP)]
    NoBackup {
        /// Why, as the node says.
        reason: String,
    },
    /// The change of members is in the log at this index: in force now, done once committed
    /// (the status's `members_pending` turns false).
    #[codec(tag = tags::client_reply::MEMBERS_CHANGING)]
    MembersChanging {
        /// Its entry.
        index: EntryIndex,
    },
    /// The change of members was refused, and why.
    #[codec(tag = tags::client_reply::MEMBERS_REFUSED)]
    MembersRefused(MembersRefusal),
    /// The handler version is in the log at this index: every replica switches there once it
    /// is committed.
    #[codec(tag = tags::client_reply::UPGRADING)]
    Upgrading {
        /// Its entry.
        index: EntryIndex,
    },
    /// The upgrade was refused, and why (nothing entered the log).
    #[codec(tag = tags::client_reply::UPGRADE_REFUSED)]
    UpgradeRefused(UpgradeRefusal),
    /// The node's handler versions.
    #[codec(tag = tags::client_reply::VERSIONS)]
    Versions(HandlerVersions),
    /// A read's outcomes, encoded back to back (see [`ClientRequest::Read`]).
    #[codec(tag = tags::client_reply::READ_RESULTS)]
    ReadResults {
        /// Outcomes in `results`.
        command_count: u32,
        /// The encoded outcomes.
        results: Vec<u8>,
    },
    /// The build the node runs.
    #[codec(tag = tags::client_reply::BUILD)]
    Build(BuildInfo),
    /// Changes from the position asked for (see [`ClientRequest::Changes`]).
    #[codec(tag = tags::client_reply::CHANGES)]
    Changes(ChangeBatch),
    /// No changes from the position asked for, and why.
    #[codec(tag = tags::client_reply::NO_CHANGES)]
    NoChanges(ChangesRefusal),
}

/// A node's build: what `status` shows of each node, so that mixed builds in a rolling
/// upgrade are visible.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct BuildInfo {
    /// The binary's version.
    pub version: String,
    /// The commit it was built from (`unknown` when not built from git).
    pub commit: String,
    /// The protocol, WAL, snapshot and backup format versions, in one line.
    pub formats: String,
}

impl ClientReply {
    /// The variant's name, for an "unexpected answer" error or a log line. The one match
    /// that lists every kind of answer: code that takes a few kinds asks the methods below.
    pub fn name(&self) -> &'static str {
        match self {
            ClientReply::Results { .. } => "results",
            ClientReply::NotLeader { .. } => "not the leader",
            ClientReply::Rejected { .. } => "rejected",
            ClientReply::Stale { .. } => "stale",
            ClientReply::Expired { .. } => "expired",
            ClientReply::Reused { .. } => "reused",
            ClientReply::NotYet { .. } => "not yet",
            ClientReply::Session { .. } => "session",
            ClientReply::Status(_) => "status",
            ClientReply::ModeSet(_) => "mode set",
            ClientReply::Refused(_) => "refused",
            ClientReply::BackupChunk(_) => "backup chunk",
            ClientReply::NoBackup { .. } => "no backup",
            ClientReply::MembersChanging { .. } => "members changing",
            ClientReply::MembersRefused(_) => "members refused",
            ClientReply::Upgrading { .. } => "upgrading",
            ClientReply::UpgradeRefused(_) => "upgrade refused",
            ClientReply::Versions(_) => "versions",
            ClientReply::ReadResults { .. } => "read results",
            ClientReply::Build(_) => "build",
            ClientReply::Changes(_) => "changes",
            ClientReply::NoChanges(_) => "no changes",
        }
    }

    /// The refusal that ends the connection, if this answer is one.
    pub fn refusal(&self) -> Option<&Refusal> {
        let ClientReply::Refused(refusal) = self else {
            return None;
        };
        Some(refusal)
    }

    /// The outcomes of a request or a read: their count and encoded bytes.
    pub fn outcomes(&self) -> Option<(u32, &[u8])> {
        let (ClientReply::Results {
            command_count,
            results,
            ..
        }
        | ClientReply::ReadResults {
            command_count,
            results,
        }) = self
        else {
            return None;
        };
        Some((*command_count, results))
    }

    /// The request an answer about one request names (results, rejected, stale, expired,
    /// reused, not yet).
    pub fn request(&self) -> Option<RequestNumber> {
        let (ClientReply::Results { request, .. }
        | ClientReply::Rejected { request, .. }
        | ClientReply::Stale { request }
        | ClientReply::Expired { request }
        | ClientReply::Reused { request }
        | ClientReply::NotYet { request }) = self
        else {
            return None;
        };
        Some(*request)
    }
}

/// Why a leader refused to put a handler version in force.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, thiserror::Error)]
#[codec(crate = "crate::codec")]
#[non_exhaustive]
pub enum UpgradeRefusal {
    /// The leader's build does not run this version.
    #[error("the leader runs handler versions {oldest} to {newest}, not {version}")]
    #[codec(tag = tags::upgrade_refusal::UNSUPPORTED)]
    Unsupported {
        /// The version asked for.
        version: u32,
        /// The oldest the leader runs.
        oldest: u32,
        /// The newest the leader runs.
        newest: u32,
    },
    /// The version is not newer than the one in force or already on its way (a downgrade
    /// would run later entries under rules older than earlier ones').
    #[error("handler version {in_force} is in force or on its way; {version} is not newer")]
    #[codec(tag = tags::upgrade_refusal::NOT_NEWER)]
    NotNewer {
        /// The version asked for.
        version: u32,
        /// The newest version in force or proposed.
        in_force: u32,
    },
    /// The node stopped applying.
    #[error("the leader has halted")]
    #[codec(tag = tags::upgrade_refusal::HALTED)]
    Halted,
}

/// A node's handler versions: those its build runs, and the one in force on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct HandlerVersions {
    /// The node.
    pub node: NodeId,
    /// The version in force after the last entry it applied.
    pub in_force: u32,
    /// The last entry it applied.
    pub applied_index: EntryIndex,
    /// The oldest version its build runs.
    pub oldest: u32,
    /// The newest version its build runs.
    pub newest: u32,
}

/// Two replicas whose state hashes differ after the same entry.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Divergence {
    /// The entry after which the hashes differ.
    pub index: EntryIndex,
    /// The reporting node and its hash.
    pub local: (NodeId, StateHash),
    /// The other node and its hash.
    pub remote: (NodeId, StateHash),
}

/// A node's view of itself.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct NodeStatus {
    /// The node.
    pub node: NodeId,
    /// Its role.
    pub role: Role,
    /// Its term.
    pub term: Term,
    /// The leader it knows of.
    pub leader: Option<NodeId>,
    /// Its last log index.
    pub last_index: EntryIndex,
    /// Its commit index.
    pub commit_index: EntryIndex,
    /// The last entry it applied.
    pub applied_index: EntryIndex,
    /// Its state hash after that entry.
    pub state_hash: StateHash,
    /// The first divergence it detected, if any.
    pub divergence: Option<Divergence>,
    /// Why it stopped applying, if it did.
    pub halted: Option<String>,
    /// Its disk is full: its WAL retries the append that failed until space returns.
    pub storage_full: bool,
    /// The execution mode it uses when it leads.
    pub mode: Mode,
    /// Where its entries' time went, since it started.
    pub stages: Stages,
    /// The members in force in its log.
    pub members: Vec<NodeId>,
    /// A change of members is in its log, not committed yet.
    pub members_pending: bool,
}

/// Cumulative time a node's entries spent in each stage of the data path, in microseconds,
/// with the number of entries each sum covers. Two snapshots subtracted give a run's averages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Stages {
    /// Entries this node proposed as leader.
    pub proposed: u64,
    /// Their first request's wait in the batcher, from arrival to proposal.
    pub batch_wait_us: u64,
    /// Proposal to this node's own WAL fsync reported.
    pub wal_us: u64,
    /// Proposal to commit (a majority durable): the replication round trip.
    pub quorum_us: u64,
    /// Simulating them.
    pub simulate_us: u64,
    /// Entries this node applied.
    pub applied: u64,
    /// Applying them (execution, or reuse of a simulation), replies included.
    pub apply_us: u64,
    /// Entries this node received as follower.
    pub received: u64,
    /// Their arrival to this node's WAL fsync reported.
    pub follower_wal_us: u64,
    /// Commands simulated (leader, at proposal).
    pub simulated_commands: u64,
    /// Commands executed on the committed state.
    pub executed_commands: u64,
    /// Commands whose simulation was reused after commit (Performance mode).
    pub reused_commands: u64,
    /// Commands executed after commit and found identical to their simulation (Verify mode).
    pub verified_commands: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;
    use crate::entry::{EntryHash, EntryKind};

    /// Proves a mode's name reads back as the mode, and any other spelling is refused with
    /// the names to use.
    #[test]
    fn modes_read_from_their_names_only() {
        for mode in Mode::ALL {
            assert_eq!(mode.name().parse::<Mode>(), Ok(mode));
            assert_eq!(mode.to_string(), mode.name());
        }
        let refused = "Verify".parse::<Mode>().unwrap_err();
        assert_eq!(refused, UnknownMode("Verify".into()));
        let message = refused.to_string();
        assert!(
            message.contains("\"verify\" and \"performance\""),
            "{message}"
        );
    }

    /// Proves a peer message carrying entries round-trips through the codec, payload included.
    #[test]
    fn append_with_entries_round_trips() {
        let first = Entry::seal(
            EntryIndex(1),
            Term(2),
            EntryKind::Noop,
            EntryIndex(0),
            0,
            Default::default(),
            &EntryHash::default(),
        );
        let second = Entry::seal(
            EntryIndex(2),
            Term(2),
            EntryKind::Commands,
            EntryIndex(1),
            3,
            bytes::Bytes::from_static(b"payload bytes"),
            &first.header.hash,
        );
        let message = PeerMessage::Append(Append {
            term: Term(2),
            leader: NodeId(1),
            prev_index: EntryIndex(0),
            prev_term: Term(0),
            entries: vec![first, second],
            commit: EntryIndex(1),
            applied: Some(AppliedHash {
                index: EntryIndex(1),
                hash: StateHash([7; 32]),
            }),
        });
        let bytes = codec::encode_to_vec(&message).unwrap();
        let back: PeerMessage = codec::decode(&bytes).unwrap();
        assert_eq!(back, message);
        let PeerMessage::Append(append) = back else {
            panic!("an append")
        };
        assert_eq!(
            append.entries[1].verify(&append.entries[0].header.hash),
            Ok(())
        );
    }

    /// Proves the backup messages came after every earlier variant: the earlier ones keep
    /// their tags (their bytes), the new ones take the next tags, and they round-trip.
    #[test]
    fn backup_messages_keep_the_earlier_tags() {
        // Tags are fixed-width u32s, little-endian.
        let tag = |bytes: Vec<u8>| u32::from_le_bytes(bytes[..4].try_into().unwrap());
        assert_eq!(
            tag(codec::encode_to_vec(&ClientRequest::Status).unwrap()),
            1
        );
        let mode = ClientRequest::SetMode(Mode::Performance);
        assert_eq!(
            codec::encode_to_vec(&mode).unwrap(),
            [2, 0, 0, 0, 1, 0, 0, 0]
        );
        let request = ClientRequest::Backup(BackupRequest {
            index: Some(EntryIndex(64)),
            offset: 1 << 20,
        });
        let bytes = codec::encode_to_vec(&request).unwrap();
        assert_eq!(tag(bytes.clone()), 4);
        assert_eq!(codec::decode::<ClientRequest>(&bytes).unwrap(), request);
        let refused = ClientReply::Refused(Refusal::BadCrc);
        assert_eq!(tag(codec::encode_to_vec(&refused).unwrap()), 10);
        let chunk = ClientReply::BackupChunk(BackupChunk {
            node: NodeId(2),
            index: EntryIndex(64),
            mode: Mode::Verify,
            offset: 0,
            total: 3,
            data: vec![1, 2, 3],
        });
        let bytes = codec::encode_to_vec(&chunk).unwrap();
        assert_eq!(tag(bytes.clone()), 11);
        assert_eq!(codec::decode::<ClientReply>(&bytes).unwrap(), chunk);
        let none = ClientReply::NoBackup {
            reason: "none".into(),
        };
        assert_eq!(tag(codec::encode_to_vec(&none).unwrap()), 12);
        let change = ClientRequest::ChangeMembers(MemberChange::Remove(NodeId(2)));
        assert_eq!(tag(codec::encode_to_vec(&change).unwrap()), 5);
        let changing = ClientReply::MembersChanging {
            index: EntryIndex(9),
        };
        assert_eq!(tag(codec::encode_to_vec(&changing).unwrap()), 13);
        let refused = ClientReply::MembersRefused(MembersRefusal::Pending);
        assert_eq!(tag(codec::encode_to_vec(&refused).unwrap()), 14);
        assert_eq!(
            tag(codec::encode_to_vec(&ClientRequest::Upgrade(2)).unwrap()),
            6
        );
        assert_eq!(
            tag(codec::encode_to_vec(&ClientRequest::Versions).unwrap()),
            7
        );
        let upgrading = ClientReply::Upgrading {
            index: EntryIndex(9),
        };
        assert_eq!(tag(codec::encode_to_vec(&upgrading).unwrap()), 15);
        let refused = ClientReply::UpgradeRefused(UpgradeRefusal::Halted);
        assert_eq!(tag(codec::encode_to_vec(&refused).unwrap()), 16);
        let versions = ClientReply::Versions(HandlerVersions {
            node: NodeId(1),
            in_force: 2,
            applied_index: EntryIndex(40),
            oldest: 1,
            newest: 2,
        });
        let bytes = codec::encode_to_vec(&versions).unwrap();
        assert_eq!(tag(bytes.clone()), 17);
        assert_eq!(codec::decode::<ClientReply>(&bytes).unwrap(), versions);
    }

    /// Proves the build question and its answer take the next tags and round-trip.
    #[test]
    fn the_build_question_takes_new_tags() {
        let tag = |bytes: Vec<u8>| u32::from_le_bytes(bytes[..4].try_into().unwrap());
        assert_eq!(tag(codec::encode_to_vec(&ClientRequest::Build).unwrap()), 9);
        let build = ClientReply::Build(BuildInfo {
            version: "0.1.0".into(),
            commit: "unknown".into(),
            formats: "protocol 4".into(),
        });
        let bytes = codec::encode_to_vec(&build).unwrap();
        assert_eq!(tag(bytes.clone()), 19);
        assert_eq!(codec::decode::<ClientReply>(&bytes).unwrap(), build);
    }

    /// Proves the change stream's question and answers take the next tags and round-trip, and
    /// that both roles may ask it.
    #[test]
    fn the_change_stream_takes_new_tags() {
        let tag = |bytes: &[u8]| u32::from_le_bytes(bytes[..4].try_into().unwrap());
        let from = ChangePosition {
            index: EntryIndex(7),
            position: 3,
        };
        let request = ClientRequest::Changes(ChangesRequest {
            from,
            bytes_max: 1 << 20,
            wait_ms: 500,
        });
        let batch = ClientReply::Changes(ChangeBatch {
            node: NodeId(2),
            entries: vec![ChangeEntry {
                index: EntryIndex(7),
                version: 1,
                changes: vec![3, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0],
            }],
            next: ChangePosition {
                index: EntryIndex(8),
                position: 0,
            },
            applied: EntryIndex(9),
        });
        let gone = ClientReply::NoChanges(ChangesRefusal::Gone {
            node: NodeId(2),
            asked: EntryIndex(7),
            oldest: EntryIndex(40),
        });
        for (message, expected) in [(&batch, 20), (&gone, 21)] {
            let bytes = codec::encode_to_vec(message).unwrap();
            assert_eq!(tag(&bytes), expected);
            assert_eq!(&codec::decode::<ClientReply>(&bytes).unwrap(), message);
        }
        let bytes = codec::encode_to_vec(&request).unwrap();
        assert_eq!(tag(&bytes), 11);
        assert_eq!(codec::decode::<ClientRequest>(&bytes).unwrap(), request);
        assert!(
            ClientRole::Application.permits(&request) && ClientRole::Operator.permits(&request)
        );
        let ClientReply::NoChanges(refusal) = gone else {
            unreachable!()
        };
        assert!(
            refusal
                .to_string()
                .contains("the oldest it serves is entry 40")
        );
    }

    /// Proves the refusal that names another role's key takes the next tag of `Refusal`
    /// (every earlier refusal keeps its bytes), round-trips, is permanent, and says what the
    /// key is and what the request needs.
    #[test]
    fn a_wrong_credential_takes_a_new_tag_and_names_both_roles() {
        let refusal = Refusal::WrongCredential {
            proved: Credential::Application,
            needs: ClientRole::Operator,
        };
        let bytes = codec::encode_to_vec(&Admission::Refused(refusal.clone())).unwrap();
        assert_eq!(bytes, [1, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]);
        let decoded = codec::decode::<Admission>(&bytes).unwrap();
        assert_eq!(decoded, Admission::Refused(refusal.clone()));
        let forbidden = Refusal::Forbidden {
            role: ClientRole::Application,
        };
        let earlier = codec::encode_to_vec(&forbidden).unwrap();
        assert_eq!(earlier, [13, 0, 0, 0, 0, 0, 0, 0]);
        assert!(refusal.is_permanent());
        assert_eq!(
            refusal.to_string(),
            "this key is the application (client) credential; mode, member, backup and \
             upgrade need the operator credential"
        );
        let peer = Refusal::WrongCredential {
            proved: Credential::Peer,
            needs: ClientRole::Operator,
        };
        assert!(
            peer.to_string()
                .starts_with("this key is the nodes' (peer) credential")
        );
        let operator = Refusal::Forbidden {
            role: ClientRole::Operator,
        };
        let said = operator.to_string();
        assert!(
            said.contains("may not submit or read business commands"),
            "{said}"
        );
    }
}
