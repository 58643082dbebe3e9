//! What IPoIB asks the SA (RFC 4391 §5, IBA §15.2.5), through the MAD agent: membership of the
//! partition's IPv4 broadcast group (SubnAdmSet of an MCMemberRecord; SubnAdmDelete to leave)
//! and the path to a neighbour's GID (SubnAdmGet of a PathRecord). softib's librdmacm asks the
//! same for rdma_cm ids on an IB port (its routes and multicast groups).

use softib::mad::{MadAgent, MadTransport};
use softib::{Gid, Lid};
use softib_wire::mad::sa::{self, McMemberRecord, PathRecord};
use softib_wire::mad::{AttrId, Method};
use softib_wire::PKey;

use crate::Error;

/// SubnAdmSet(MCMemberRecord): `port_gid` a full member of the IPv4 broadcast group of
/// partition `pkey`; the group's record as the SA answers it (MLID, Q_Key, SL, MTU).
pub fn join_broadcast<T: MadTransport + ?Sized>(
    agent: &mut MadAgent,
    t: &mut T,
    sa_lid: Lid,
    pkey: PKey,
    port_gid: Gid,
) -> Result<McMemberRecord, Error> {
    let rec = McMemberRecord {
        mgid: sa::ipoib_broadcast_mgid(pkey),
        port_gid,
        join_state: sa::join_state::FULL_MEMBER,
        ..McMemberRecord::default()
    };
    join(agent, t, sa_lid, &rec, sa::mcmember_comp::JOIN)
}

/// SubnAdmSet(MCMemberRecord): the join `rec` asks for, with the components `comp` says it
/// carries (a group that does not exist yet is created from them); the group's record as the
/// SA answers it.
pub fn join<T: MadTransport + ?Sized>(
    agent: &mut MadAgent,
    t: &mut T,
    sa_lid: Lid,
    rec: &McMemberRecord,
    comp: u64,
) -> Result<McMemberRecord, Error> {
    mcmember(agent, t, sa_lid, Method::Set, rec, comp)
}

/// SubnAdmDelete(MCMemberRecord): leaves the group `rec` names (MGID, PortGID, the JoinState
/// bits to give up).
pub fn leave<T: MadTransport + ?Sized>(
    agent: &mut MadAgent,
    t: &mut T,
    sa_lid: Lid,
    rec: &McMemberRecord,
) -> Result<McMemberRecord, Error> {
    mcmember(
        agent,
        t,
        sa_lid,
        Method::Delete,
        rec,
        sa::mcmember_comp::JOIN,
    )
}

fn mcmember<T: MadTransport + ?Sized>(
    agent: &mut MadAgent,
    t: &mut T,
    sa_lid: Lid,
    method: Method,
    rec: &McMemberRecord,
    comp: u64,
) -> Result<McMemberRecord, Error> {
    let mut data = [0u8; McMemberRecord::LEN];
    rec.emit(&mut data);
    let r = agent.sa_query(t, sa_lid, method, AttrId::MC_MEMBER_RECORD, comp, &data)?;
    McMemberRecord::parse(sa_data(r.mad())).map_err(|e| Error::Answer {
        what: "MCMemberRecord",
        detail: e.to_string(),
    })
}

/// SubnAdmGet(PathRecord): one path from `sgid` to `dgid`.
pub fn path_to<T: MadTransport + ?Sized>(
    agent: &mut MadAgent,
    t: &mut T,
    sa_lid: Lid,
    sgid: Gid,
    dgid: Gid,
) -> Result<PathRecord, Error> {
    let mut template = PathRecord::parse(&[0u8; PathRecord::LEN]).map_err(|e| Error::Answer {
        what: "PathRecord template",
        detail: e.to_string(),
    })?;
    template.sgid = sgid;
    template.dgid = dgid;
    template.numb_path = 1;
    let mut data = [0u8; PathRecord::LEN];
    template.emit(&mut data);
    let comp = sa::path_comp::SGID | sa::path_comp::DGID | sa::path_comp::NUMB_PATH;
    let r = agent.sa_query(t, sa_lid, Method::Get, AttrId::PATH_RECORD, comp, &data)?;
    PathRecord::parse(sa_data(r.mad())).map_err(|e| Error::Answer {
        what: "PathRecord",
        detail: e.to_string(),
    })
}

/// The SA data area of an answer (its record); empty when the answer is not an SA MAD.
fn sa_data(mad: &[u8; softib_wire::mad::MAD_LEN]) -> &[u8] {
    sa::Repr::parse(&sa::Packet::new_unchecked(&mad[..])).map_or(&[], |r| r.data)
}
