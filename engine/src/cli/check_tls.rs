//! What `check` says of a cluster's TLS: each node's files loaded as the node would load them
//! (readable, parsable, the key its certificate's, signed by the CA), the names its
//! certificate holds against the hosts others dial it by, and its validity. A node's files
//! that are not on this host (each host holds its own node's key) are said to be elsewhere,
//! not counted as errors.

use crate::node::{ClusterFile, ClusterFileError, NodeEntry};
use net::tls::{CertificateFacts, TlsError};
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What `check` found of one node's TLS.
pub(super) enum NodeTls {
    /// Its certificate or key is not on this host.
    Elsewhere(String),
    /// Its files load; the certificate's facts, and a warning when it ends soon.
    Loaded {
        facts: CertificateFacts,
        warning: Option<String>,
    },
    /// Its files do not load, or the certificate does not fit the node.
    Failed(TlsProblem),
}

/// Why a node's TLS fails `check`.
#[derive(Debug, thiserror::Error)]
pub(super) enum TlsProblem {
    /// The cluster file's TLS settings for the node do not give its files.
    #[error(transparent)]
    Files(ClusterFileError),
    /// The files do not load, or the certificate is not one the others accept.
    #[error(transparent)]
    Tls(TlsError),
    /// The certificate file holds no certificate.
    #[error("no certificate")]
    NoCertificate,
    /// The certificate is not valid now.
    #[error("the certificate is {problem} (valid {} to {})", date(*not_before), date(*not_after))]
    NotValidNow {
        /// What is wrong: not valid yet, or expired.
        problem: String,
        /// Its first valid second, in Unix seconds.
        not_before: i64,
        /// Its last valid second, in Unix seconds.
        not_after: i64,
    },
}

/// Each node's TLS, for a cluster that speaks it (none otherwise), as of `now`.
pub(super) fn report(file: &ClusterFile, now: SystemTime) -> Vec<(u8, NodeTls)> {
    let Some(ca) = &file.tls_ca_file else {
        return Vec::new();
    };
    let seconds = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let one = |node: &NodeEntry| {
        let files = match node.tls_files(ca) {
            Ok(files) => files,
            Err(error) => return NodeTls::Failed(TlsProblem::Files(error)),
        };
        let hosts = [node.peer_address.host(), node.client_address.host()];
        let inspected = net::tls::inspect(&files)
            .and_then(|found| net::tls::verify_for_hosts(&files, &hosts).map(|()| found));
        match inspected {
            Err(TlsError::Read { key, path, source })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                NodeTls::Elsewhere(format!("{key} {} is not on this host", path.display()))
            }
            Err(error) => NodeTls::Failed(TlsProblem::Tls(error)),
            Ok((None, _)) => NodeTls::Failed(TlsProblem::NoCertificate),
            Ok((Some(facts), _)) => judge(facts, seconds),
        }
    };
    file.nodes.iter().map(|n| (n.id, one(n))).collect()
}

/// A certificate the others accept, against the time: a warning when it ends soon (the
/// verifier has refused an expired one already).
fn judge(facts: CertificateFacts, now: i64) -> NodeTls {
    match facts.problem_at(now) {
        Some((true, problem)) => NodeTls::Failed(TlsProblem::NotValidNow {
            problem,
            not_before: facts.not_before,
            not_after: facts.not_after,
        }),
        Some((false, warning)) => NodeTls::Loaded {
            facts,
            warning: Some(warning),
        },
        None => NodeTls::Loaded {
            facts,
            warning: None,
        },
    }
}

/// A Unix time as an RFC 3339 date.
fn date(seconds: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_secs(seconds.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The errors of a report, one per failing node.
pub(super) fn errors(report: &[(u8, NodeTls)]) -> Vec<String> {
    let failed = |(id, tls): &(u8, NodeTls)| match tls {
        NodeTls::Failed(reason) => Some(format!("node {id}: TLS: {reason}")),
        NodeTls::Elsewhere(_) | NodeTls::Loaded { .. } => None,
    };
    report.iter().filter_map(failed).collect()
}

/// One node's TLS, for programs.
pub(super) fn json_of(tls: &NodeTls) -> Value {
    match tls {
        NodeTls::Elsewhere(note) => json!({ "state": "elsewhere", "note": note }),
        NodeTls::Failed(reason) => json!({ "state": "failed", "error": reason.to_string() }),
        NodeTls::Loaded { facts, warning } => json!({
            "state": "loaded",
            "subject": facts.subject,
            "names": facts.names,
            "not_before": date(facts.not_before),
            "not_after": date(facts.not_after),
            "warning": warning,
        }),
    }
}

/// One node's TLS, for people.
pub(super) fn line(tls: &NodeTls) -> String {
    match tls {
        NodeTls::Elsewhere(note) => format!("TLS files elsewhere: {note}"),
        NodeTls::Failed(reason) => format!("TLS: {reason}"),
        NodeTls::Loaded { facts, warning } => format!(
            "TLS certificate {} for {}, valid until {}{}",
            facts.subject,
            facts.names.join(", "),
            date(facts.not_after),
            warning
                .as_ref()
                .map(|w| format!(" (WARNING: {w})"))
                .unwrap_or_default()
        ),
    }
}
