use super::*;
use proptest::prelude::*;
use std::vec::Vec;

fn req() -> Req {
    let mut private_data = [0u8; private_len::REQ];
    CmaHeader {
        src_port: 0xC350,
        addrs: CmaAddrs::V4 {
            src: [127, 0, 0, 1],
            dst: [127, 0, 0, 2],
        },
    }
    .emit(&mut private_data);
    private_data[CmaHeader::LEN] = 0xAB;
    Req {
        local_comm_id: 0x1122_3344,
        vendor_id: 0x00_1405,
        service_id: service_id(PortSpace::Tcp, 7174),
        local_ca_guid: Guid(0x0002_c903_0000_0001),
        local_qkey: QKey(0),
        local_qpn: Qpn::new(0x00_0011),
        responder_resources: 4,
        local_eecn: 0,
        initiator_depth: 2,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service: TransportService::Rc,
        end_to_end_flow_control: true,
        starting_psn: Psn::new(0xABCDEF),
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: PKey(0xFFFF),
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport: 0,
        primary: Path {
            local_lid: Lid(0),
            remote_lid: Lid(0),
            local_gid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1]),
            remote_gid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2]),
            flow_label: 0xABCDE,
            packet_rate: 0x3F,
            traffic_class: 0x10,
            hop_limit: 64,
            sl: 0,
            subnet_local: true,
            local_ack_timeout: 18,
        },
        alternate: Path::default(),
        private_data,
    }
}

/// The REQ's fields at the byte offsets of IBA table 102 (which count from the start of
/// the MAD), written out by hand.
#[test]
fn req_fields_sit_at_the_spec_offsets() {
    let mad = Message::Req(req()).emit(0x0102_0304_0506_0708);
    // Common header: base version 1, class 0x07, class version 2, method Send.
    assert_eq!(&mad[0..4], &[1, 0x07, 2, 0x03]);
    assert_eq!(&mad[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&mad[16..18], &[0x00, 0x10]); // AttributeID REQ
    assert_eq!(&mad[24..28], &[0x11, 0x22, 0x33, 0x44]); // Local Communication ID
    assert_eq!(&mad[28..32], &[0, 0x00, 0x14, 0x05]); // reserved, VendorID
    assert_eq!(&mad[32..40], &[0, 0, 0, 0, 0x01, 0x06, 0x1C, 0x06]); // ServiceID TCP:7174
    assert_eq!(&mad[40..48], &[0x00, 0x02, 0xc9, 0x03, 0, 0, 0, 1]); // Local CA GUID
    assert_eq!(&mad[56..60], &[0, 0, 0x11, 4]); // Local QPN, Responder Resources
    assert_eq!(&mad[60..64], &[0, 0, 0, 2]); // Local EECN, Initiator Depth
                                             // Remote EECN; Remote CM Response Timeout 20 (bits 0-4), RC (bits 5-6), E2E FC (bit 7).
    assert_eq!(&mad[64..68], &[0, 0, 0, (20 << 3) | 1]);
    // Starting PSN; Local CM Response Timeout 20, Retry Count 7.
    assert_eq!(&mad[68..72], &[0xAB, 0xCD, 0xEF, (20 << 3) | 7]);
    assert_eq!(&mad[72..74], &[0xFF, 0xFF]); // P_Key
    assert_eq!(mad[74], (3 << 4) | 7); // Path MTU 1024, RDC 0, RNR Retry 7
    assert_eq!(mad[75], 15 << 4); // Max CM Retries, SRQ 0, ext. transport 0
    assert_eq!(&mad[76..80], &[0, 0, 0, 0]); // primary LIDs
    assert_eq!(&mad[80 + 10..80 + 16], &[0xff, 0xff, 127, 0, 0, 1]); // primary local GID
    assert_eq!(&mad[96 + 10..96 + 16], &[0xff, 0xff, 127, 0, 0, 2]); // primary remote GID
                                                                     // Flow label 0xABCDE (20 bits), reserved 6 bits, packet rate 0x3F.
    assert_eq!(&mad[112..116], &[0xAB, 0xCD, 0xE0, 0x3F]);
    assert_eq!(&mad[116..118], &[0x10, 64]); // traffic class, hop limit
    assert_eq!(mad[118], 0x08); // SL 0, subnet local
    assert_eq!(mad[119], 18 << 3); // local ACK timeout
    assert!(mad[120..164].iter().all(|&b| b == 0)); // no alternate path
                                                    // Private data at 164: the rdma_cm header (annex A11.4).
    assert_eq!(&mad[164..168], &[0, 0x40, 0xC3, 0x50]);
    assert_eq!(&mad[164 + 16..164 + 20], &[127, 0, 0, 1]);
    assert_eq!(&mad[164 + 32..164 + 36], &[127, 0, 0, 2]);
    assert_eq!(mad[164 + 36], 0xAB);
    let (h, m) = Message::parse(&mad).expect("parses");
    assert_eq!(h.tid, 0x0102_0304_0506_0708);
    assert_eq!(m, Message::Req(req()));
}

#[test]
fn rep_rej_dreq_sidr_fields_sit_at_the_spec_offsets() {
    let mut rep = Rep {
        local_comm_id: 0xA,
        remote_comm_id: 0xB,
        local_qkey: QKey(0),
        local_qpn: Qpn::new(0x123456),
        local_eecn: 0,
        starting_psn: Psn::new(0x654321),
        responder_resources: 1,
        initiator_depth: 2,
        target_ack_delay: 15,
        failover_accepted: 1,
        end_to_end_flow_control: false,
        rnr_retry_count: 7,
        srq: true,
        vendor_id: 0xAABBCC,
        local_ca_guid: Guid(0x1122334455667788),
        private_data: [0; private_len::REP],
    };
    rep.private_data[0] = 0x5A;
    let mad = Message::Rep(rep).emit(1);
    assert_eq!(&mad[16..18], &[0x00, 0x13]);
    assert_eq!(&mad[24..32], &[0, 0, 0, 0xA, 0, 0, 0, 0xB]);
    assert_eq!(&mad[36..40], &[0x12, 0x34, 0x56, 0xAA]); // QPN, VendorID high
    assert_eq!(&mad[40..44], &[0, 0, 0, 0xBB]); // EECN, VendorID middle
    assert_eq!(&mad[44..48], &[0x65, 0x43, 0x21, 0xCC]); // PSN, VendorID low
    assert_eq!(
        &mad[48..52],
        &[1, 2, (15 << 3) | (1 << 1), (7 << 5) | (1 << 4)]
    );
    assert_eq!(&mad[52..60], &0x1122334455667788u64.to_be_bytes());
    assert_eq!(mad[60], 0x5A);
    assert_eq!(Message::parse(&mad).map(|x| x.1), Ok(Message::Rep(rep)));

    let rej = Rej {
        local_comm_id: 1,
        remote_comm_id: 2,
        message_rejected: MessageKind::Req,
        rejected_info_len: 0,
        reason: RejectReason::InvalidServiceId,
        ari: [0; ARI_LEN],
        private_data: [7; private_len::REJ],
    };
    let mad = Message::Rej(rej).emit(2);
    assert_eq!(&mad[32..36], &[0, 0, 0, 8]); // MessageRejected REQ, no ARI, reason 8
    assert_eq!(mad[108], 7); // private data at 108
    assert_eq!(mad[255], 7);
    assert_eq!(Message::parse(&mad).map(|x| x.1), Ok(Message::Rej(rej)));

    let dreq = Dreq {
        local_comm_id: 3,
        remote_comm_id: 4,
        remote_qpn: Qpn::new(0x17),
        private_data: [0; private_len::DREQ],
    };
    let mad = Message::Dreq(dreq).emit(3);
    assert_eq!(&mad[32..36], &[0, 0, 0x17, 0]);
    assert_eq!(Message::parse(&mad).map(|x| x.1), Ok(Message::Dreq(dreq)));

    let sidr = SidrRep {
        request_id: 9,
        status: SidrStatus::Ok,
        info_len: 0,
        vendor_id: 0x010203,
        qpn: Qpn::new(0x42),
        service_id: service_id(PortSpace::Udp, 7174),
        qkey: QKey(0x0111_1C06),
        info: [0; ARI_LEN],
        private_data: [0; private_len::SIDR_REP],
    };
    let mad = Message::SidrRep(sidr).emit(4);
    assert_eq!(&mad[28..36], &[0, 0, 0x01, 0x02, 0, 0, 0x42, 0x03]);
    assert_eq!(&mad[36..44], &[0, 0, 0, 0, 0x01, 0x11, 0x1C, 0x06]);
    assert_eq!(&mad[44..48], &[0x01, 0x11, 0x1C, 0x06]);
    assert_eq!(
        Message::parse(&mad).map(|x| x.1),
        Ok(Message::SidrRep(sidr))
    );
}

#[test]
fn service_ids_per_port_space() {
    assert_eq!(service_id(PortSpace::Tcp, 7174), 0x0000_0000_0106_1C06);
    assert_eq!(service_id(PortSpace::Udp, 1), 0x0000_0000_0111_0001);
    assert_eq!(service_id(PortSpace::Ipoib, 2), 0x0000_0000_0002_0002);
    assert_eq!(service_id(PortSpace::Ib, 3), 0x0000_0000_013F_0003);
    assert_eq!(
        split_service_id(0x0000_0000_0106_1C06),
        Some((PortSpace::Tcp, 7174))
    );
    assert_eq!(split_service_id(0x0000_0000_0107_0000), None);
    assert_eq!(split_service_id(0x1000_0000_0106_0000), None);
}

#[test]
fn cma_header_v6_and_bad_versions() {
    let h = CmaHeader {
        src_port: 1,
        addrs: CmaAddrs::V6 {
            src: [1; 16],
            dst: [2; 16],
        },
    };
    let mut b = [0u8; 40];
    h.emit(&mut b);
    assert_eq!(b[1], 0x60);
    assert_eq!(CmaHeader::parse(&b), Ok(h));
    b[1] = 0x50;
    assert!(matches!(CmaHeader::parse(&b), Err(Error::Malformed(_))));
    b[0] = 1;
    assert!(matches!(CmaHeader::parse(&b), Err(Error::Unsupported(_))));
    assert!(matches!(
        CmaHeader::parse(&b[..35]),
        Err(Error::Truncated(_))
    ));
}

#[test]
fn wrong_class_version_method_attribute_and_length_are_named() {
    let good = Message::Rtu(Rtu {
        local_comm_id: 1,
        remote_comm_id: 2,
        private_data: [0; private_len::RTU],
    })
    .emit(5);
    assert!(matches!(
        Message::parse(&good[..255]),
        Err(Error::Truncated(_))
    ));
    let mut m = good;
    m[1] = 0x03;
    assert!(matches!(Message::parse(&m), Err(Error::Malformed(_))));
    let mut m = good;
    m[2] = 1;
    assert!(matches!(Message::parse(&m), Err(Error::Unsupported(_))));
    let mut m = good;
    m[3] = 0x01;
    assert!(matches!(Message::parse(&m), Err(Error::Unsupported(_))));
    let mut m = good;
    m[17] = 0x1B;
    assert!(matches!(Message::parse(&m), Err(Error::Unsupported(_))));
    let mut m = Message::Rej(Rej {
        local_comm_id: 1,
        remote_comm_id: 0,
        message_rejected: MessageKind::Req,
        rejected_info_len: 0,
        reason: RejectReason::Timeout,
        ari: [0; ARI_LEN],
        private_data: [0; private_len::REJ],
    })
    .emit(6);
    m[33] = 73 << 1;
    assert!(matches!(Message::parse(&m), Err(Error::Malformed(_))));
}

fn arb_cm_mad() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(any::<u8>(), MAD_LEN),
        0x0010u16..=0x001B,
    )
        .prop_map(|(mut b, attr)| {
            b[1] = 0x07;
            b[2] = CLASS_VERSION;
            b[3] = 0x03;
            b[16..18].copy_from_slice(&attr.to_be_bytes());
            b
        })
}

proptest! {
    /// Whatever the bytes, parsing answers; and what parses re-emits to the same message.
    #[test]
    fn parse_never_panics_and_emit_inverts_it(b in arb_cm_mad(), n in 0usize..=MAD_LEN) {
        let _ = Message::parse(&b[..n]);
        if let Ok((h, m)) = Message::parse(&b) {
            let again = m.emit(h.tid);
            prop_assert_eq!(Message::parse(&again).map(|x| x.1), Ok(m));
        }
        let _ = CmaHeader::parse(&b[24..24 + n.min(232)]);
    }
}
