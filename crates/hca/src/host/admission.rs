//! Who may do what on a host's HCA.
//!
//! Two permissions, as on a Linux host with an RDMA NIC: *verbs* (the `/dev/infiniband/uverbs*`
//! a user is given: PDs, MRs, CQs, QPs, posting, polling, CM, SA queries, SMP Gets), and
//! *management* (what changes the HCA for every user of it: faults, capture, ports enabled or
//! disabled, RoCE links added or deleted, the SM's role and SMP/PerfMgt Sets — root's
//! `/dev/infiniband/umad*`, `issm*` and `rdma link` on Linux). The daemon's owner and root have
//! both; users admitted with `--allow-users` or `--allow-group` have verbs only; nobody else
//! is served. Who a client is comes from the kernel (SO_PEERCRED, SO_PEERGROUPS at connect),
//! never from what it says.

use std::collections::BTreeSet;

use softib_net::peer::PeerCred;
use softib_proto::Request;

/// MAD method Set (IBA 13.4.5), and the management classes whose Sets change a port for all:
/// subnet management, LID-routed and directed-route (IBA 14.2), and performance management
/// (PortCounters cleared, IBA 16.1).
const METHOD_SET: u8 = 0x02;
const CLASS_SMP_LID: u8 = 0x01;
const CLASS_SMP_DR: u8 = 0x81;
const CLASS_PERF: u8 = 0x04;

/// Who a host serves besides its owner and root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// The daemon's owner (its effective uid): management and verbs.
    pub owner: u32,
    /// Users given verbs.
    pub users: BTreeSet<u32>,
    /// Groups whose members (primary or supplementary, at connect) are given verbs.
    pub groups: BTreeSet<u32>,
}

/// What a client may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Access {
    /// Verbs and management: the owner and root.
    Manage,
    /// Verbs only: an admitted user.
    Verbs,
    /// Nothing: the reason, which answers its Hello before it is sent away.
    Refused(String),
}

impl Admission {
    /// The default: the daemon's own user (and root) only.
    pub fn owner_only() -> Admission {
        Admission {
            owner: rustix::process::geteuid().as_raw(),
            users: BTreeSet::new(),
            groups: BTreeSet::new(),
        }
    }

    /// Whether users besides the owner and root are admitted (the socket and the runtime
    /// directory must then let them in).
    pub fn admits_others(&self) -> bool {
        !self.users.is_empty() || !self.groups.is_empty()
    }

    /// What the peer `cred` may do.
    pub(super) fn access(&self, cred: &PeerCred) -> Access {
        if cred.uid == self.owner || cred.uid == 0 {
            Access::Manage
        } else if self.users.contains(&cred.uid) || self.groups.iter().any(|g| cred.in_group(*g)) {
            Access::Verbs
        } else {
            Access::Refused(format!(
                "permission denied: uid {} may not use this HCA: softibd serves {}; start it \
                 with --allow-users {} (or --allow-group GROUP) to give this user verbs",
                cred.uid,
                self.served(),
                cred.uid
            ))
        }
    }

    /// Whom it serves, for messages.
    fn served(&self) -> String {
        let mut s = format!("its owner (uid {}) and root", self.owner);
        if !self.users.is_empty() {
            let list: Vec<String> = self.users.iter().map(u32::to_string).collect();
            s += &format!(", uid {}", list.join(","));
        }
        if !self.groups.is_empty() {
            let list: Vec<String> = self.groups.iter().map(u32::to_string).collect();
            s += &format!(", members of gid {}", list.join(","));
        }
        s
    }

    /// The refusal of management `what` to a client with verbs only.
    pub(super) fn management_refused(&self, what: &str) -> String {
        format!(
            "permission denied: {what} needs the management permission, which only softibd's \
             owner (uid {}) and root have; this user has verbs only — run it as uid {} or root",
            self.owner, self.owner
        )
    }
}

/// The management a request is, named for the refusal; `None` for verbs.
pub(super) fn management(req: &Request) -> Option<&'static str> {
    use Request as R;
    let mad_set = |mad: &[u8], classes: &[u8]| {
        mad.len() >= 4 && classes.contains(&mad[1]) && mad[3] == METHOD_SET
    };
    Some(match req {
        R::SetFaults { .. } => "setting faults",
        R::Capture { .. } => "capturing packets",
        R::SetPortEnabled { .. } => "enabling or disabling a port",
        R::LinkAdd(_) => "adding a link",
        R::LinkDel { .. } => "deleting a link",
        R::SetSm { .. } => "setting the port's SM",
        R::OpenMad { sm: true, .. } => "opening a port as its SM",
        R::SendSmp { mad, .. } if mad_set(mad, &[CLASS_SMP_LID, CLASS_SMP_DR]) => {
            "an SMP Set (SubnSet)"
        }
        R::SendGmp { mad, .. } | R::SendGmpGid { mad, .. } if mad_set(mad, &[CLASS_PERF]) => {
            "a PerfMgt Set"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_wire::{Lid, Qpn};

    fn cred(uid: u32, gid: u32, groups: &[u32]) -> PeerCred {
        PeerCred {
            pid: 1,
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn the_owner_and_root_manage_admitted_users_have_verbs_others_nothing() {
        let mut a = Admission {
            owner: 1000,
            users: BTreeSet::new(),
            groups: BTreeSet::new(),
        };
        assert!(!a.admits_others());
        assert_eq!(a.access(&cred(1000, 1000, &[])), Access::Manage);
        assert_eq!(a.access(&cred(0, 0, &[])), Access::Manage);
        let Access::Refused(why) = a.access(&cred(1001, 1001, &[])) else {
            panic!("another user was admitted by default");
        };
        assert!(why.contains("uid 1001 may not use"), "{why}");
        assert!(why.contains("--allow-users 1001"), "{why}");
        a.users.insert(1001);
        a.groups.insert(500);
        assert!(a.admits_others());
        assert_eq!(a.access(&cred(1001, 1001, &[])), Access::Verbs);
        // A group member, by its primary or a supplementary group.
        assert_eq!(a.access(&cred(1002, 500, &[])), Access::Verbs);
        assert_eq!(a.access(&cred(1003, 1003, &[7, 500])), Access::Verbs);
        let Access::Refused(why) = a.access(&cred(1004, 1004, &[7])) else {
            panic!("a user outside the group was admitted");
        };
        assert!(why.contains("uid 1001"), "{why}");
        assert!(why.contains("gid 500"), "{why}");
    }

    #[test]
    fn management_requests_are_named_and_verbs_are_not() {
        let mut smp = vec![0u8; 256];
        smp[0] = 1;
        smp[1] = CLASS_SMP_DR;
        smp[3] = 0x01; // Get
        let get = Request::SendSmp {
            dev: 0,
            port: 1,
            dlid: None,
            mad: smp.clone(),
        };
        assert_eq!(management(&get), None);
        smp[3] = METHOD_SET;
        let set = Request::SendSmp {
            dev: 0,
            port: 1,
            dlid: Some(Lid(1)),
            mad: smp.clone(),
        };
        assert_eq!(management(&set), Some("an SMP Set (SubnSet)"));
        // An SA Set (a multicast join) is a verb; a PerfMgt Set is not.
        smp[1] = 0x03;
        let sa = Request::SendGmp {
            dev: 0,
            port: 1,
            dlid: Lid(1),
            dest_qpn: Qpn::GSI,
            mad: smp.clone(),
        };
        assert_eq!(management(&sa), None);
        smp[1] = CLASS_PERF;
        let perf = Request::SendGmp {
            dev: 0,
            port: 1,
            dlid: Lid(1),
            dest_qpn: Qpn::GSI,
            mad: smp,
        };
        assert_eq!(management(&perf), Some("a PerfMgt Set"));
        let agent = |sm| Request::OpenMad {
            dev: 0,
            port: 1,
            sm,
        };
        assert_eq!(management(&agent(false)), None);
        assert!(management(&agent(true)).is_some());
        assert!(management(&Request::LinkShow).is_none());
        assert!(management(&Request::LinkDel { name: "x".into() }).is_some());
        assert!(management(&Request::AllocPd { dev: 0 }).is_none());
    }
}

#[cfg(test)]
mod served {
    use super::*;
    use crate::host::testing::TestHost;
    use softib_proto::{ErrorKind, Response};

    #[test]
    fn a_client_with_verbs_only_is_refused_management_and_the_owner_is_not() {
        let mut t = TestHost::new();
        let user = t.client();
        t.clients.get_mut(&user).unwrap().access = Access::Verbs;
        let owner = t.client();
        // Verbs are served.
        t.handle(user, Request::AllocPd { dev: 0 });
        t.ok(
            user,
            Request::OpenMad {
                dev: 0,
                port: 1,
                sm: false,
            },
        );
        let mut smp = vec![0u8; 256];
        smp[..4].copy_from_slice(&[1, CLASS_SMP_DR, 1, METHOD_SET]);
        smp[16..18].copy_from_slice(&0x0015u16.to_be_bytes()); // PortInfo
        let management = [
            Request::SetPortEnabled {
                dev: 0,
                port: 1,
                enabled: false,
            },
            Request::SetFaults {
                dev: 0,
                port: 0,
                spec: Default::default(),
            },
            Request::Capture { dev: 0, path: None },
            Request::SetSm {
                dev: 0,
                port: 1,
                sm_info: None,
            },
            Request::OpenMad {
                dev: 0,
                port: 2,
                sm: true,
            },
            Request::SendSmp {
                dev: 0,
                port: 1,
                dlid: None,
                mad: smp,
            },
            Request::LinkDel { name: "x".into() },
        ];
        for req in management {
            let (kind, message) = t.refused(user, req.clone());
            assert_eq!(kind, ErrorKind::Permission, "{req:?}: {message}");
            assert!(
                message.contains("needs the management permission"),
                "{message}"
            );
            if let Some(Response::Error { kind, message }) = t.call(owner, req.clone()) {
                assert_ne!(kind, ErrorKind::Permission, "{req:?}: {message}");
            }
        }
    }
}
