//! The cluster's membership: which nodes vote and count toward a quorum, with the addresses
//! the others reach them at. It changes only through the log, one node at a time: a members
//! entry holds the whole new list, and every replica uses the newest list in its log from the
//! moment the entry is appended (Raft thesis, section 4.1; `notes/decisions/membership.md`).

use crate::codec::{self, Decode, Encode};
use crate::ids::NodeId;
pub use net::message::{Member, MemberChange};

/// Most nodes a cluster has at once.
pub const MEMBERS_MAX: usize = 9;
/// Most bytes of one address as written (`host:port`).
pub const MEMBER_ADDRESS_BYTES_MAX: usize = 255;

/// The members, ordered by id, no id twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Members(Vec<Member>);

/// Why a list of members or a change of it is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Encode, Decode)]
#[codec(crate = "crate::codec")]
#[non_exhaustive]
pub enum MembersError {
    /// The node to add is a member already.
    #[error("node {0} is a member already")]
    AlreadyMember(NodeId),
    /// The node to remove is not a member.
    #[error("node {0} is not a member")]
    NotMember(NodeId),
    /// The change would leave no member.
    #[error("the last member cannot be removed")]
    LastMember,
    /// The change would exceed [`MEMBERS_MAX`].
    #[error("a cluster has at most {MEMBERS_MAX} members")]
    TooMany,
    /// An address is empty or longer than [`MEMBER_ADDRESS_BYTES_MAX`].
    #[error("node {0}: an address must be 1 to {MEMBER_ADDRESS_BYTES_MAX} bytes")]
    Address(NodeId),
    /// The payload of a members entry does not decode.
    #[error("a members entry does not decode")]
    Damaged,
}

impl Members {
    /// The list of `members`, sorted by id; refused if an id repeats or there are too many.
    pub fn new(mut members: Vec<Member>) -> Result<Self, MembersError> {
        members.sort_by_key(|m| m.id);
        if let Some(pair) = members.windows(2).find(|p| p[0].id == p[1].id) {
            return Err(MembersError::AlreadyMember(pair[0].id));
        }
        if members.len() > MEMBERS_MAX {
            return Err(MembersError::TooMany);
        }
        Ok(Members(members))
    }

    /// Members known by id only (addresses come from the cluster file): a cluster's first list.
    pub fn of_ids(ids: impl IntoIterator<Item = NodeId>) -> Self {
        let members = ids
            .into_iter()
            .map(|id| Member {
                id,
                peer_address: String::new(),
                client_address: String::new(),
            })
            .collect();
        Members::new(members).expect("a cluster file's nodes have distinct ids")
    }

    /// The members.
    pub fn list(&self) -> &[Member] {
        &self.0
    }

    /// Their ids, ascending.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + Clone + '_ {
        self.0.iter().map(|m| m.id)
    }

    /// True when `id` is a member.
    pub fn contains(&self, id: NodeId) -> bool {
        self.0.binary_search_by_key(&id, |m| m.id).is_ok()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there is none (a node waiting to join knows no members yet).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The list after `change`, which must change exactly one node.
    pub fn changed(&self, change: &MemberChange) -> Result<Members, MembersError> {
        let mut members = self.0.clone();
        match change {
            MemberChange::Add(member) => {
                if self.contains(member.id) {
                    return Err(MembersError::AlreadyMember(member.id));
                }
                let bad = |a: &str| a.is_empty() || a.len() > MEMBER_ADDRESS_BYTES_MAX;
                if bad(&member.peer_address) || bad(&member.client_address) {
                    return Err(MembersError::Address(member.id));
                }
                members.push(member.clone());
            }
            MemberChange::Remove(id) => {
                if !self.contains(*id) {
                    return Err(MembersError::NotMember(*id));
                }
                if self.len() == 1 {
                    return Err(MembersError::LastMember);
                }
                members.retain(|m| m.id != *id);
            }
        }
        Members::new(members)
    }

    /// The payload of a members entry holding this list.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode_to_vec(self).expect("members encode")
    }

    /// The list a members entry's payload holds.
    pub fn decode(payload: &[u8]) -> Result<Members, MembersError> {
        let members: Members = codec::decode(payload).map_err(|_| MembersError::Damaged)?;
        // What a leader wrote is sorted and distinct; anything else was not written by one.
        Members::new(members.0.clone()).map_err(|_| MembersError::Damaged)?;
        Ok(members)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u8) -> Member {
        Member {
            id: NodeId(id),
            peer_address: format!("node{id}:7000"),
            client_address: format!("node{id}:8000"),
        }
    }

    #[test]
    fn one_node_changes_at_a_time_and_the_list_round_trips() {
        let three = Members::new(vec![member(3), member(1), member(2)]).unwrap();
        assert_eq!(
            three.ids().collect::<Vec<_>>(),
            [NodeId(1), NodeId(2), NodeId(3)]
        );
        let four = three.changed(&MemberChange::Add(member(4))).unwrap();
        assert_eq!(four.len(), 4);
        assert!(four.contains(NodeId(4)));
        assert_eq!(Members::decode(&four.encode()).unwrap(), four);
        let back = four.changed(&MemberChange::Remove(NodeId(2))).unwrap();
        assert_eq!(
            back.ids().collect::<Vec<_>>(),
            [NodeId(1), NodeId(3), NodeId(4)]
        );
        assert_eq!(
            three.changed(&MemberChange::Add(member(2))),
            Err(MembersError::AlreadyMember(NodeId(2)))
        );
        assert_eq!(
            three.changed(&MemberChange::Remove(NodeId(9))),
            Err(MembersError::NotMember(NodeId(9)))
        );
        let one = Members::new(vec![member(1)]).unwrap();
        assert_eq!(
            one.changed(&MemberChange::Remove(NodeId(1))),
            Err(MembersError::LastMember)
        );
        let mut nameless = member(5);
        nameless.peer_address.clear();
        assert_eq!(
            three.changed(&MemberChange::Add(nameless)),
            Err(MembersError::Address(NodeId(5)))
        );
        assert_eq!(Members::decode(b"\xff\xff"), Err(MembersError::Damaged));
    }
}
