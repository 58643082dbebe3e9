//! RMPP reassembly (IBA §13.6) of an SA response, as the requester (`saquery`) receives it.
//!
//! The SA sends a GetTableResp too large for one MAD as RMPP DATA segments
//! (`softib_fabric::sa`): each repeats the headers and carries SegmentNumber 1, 2, ... in
//! Data1; the first has FIRST and the whole PayloadLength (every segment's 20-byte SA header
//! plus the records) in Data2, the last has LAST. Segments may arrive duplicated or out of
//! order (a lossy port, faults on a link, a retried request); [`Reassembly`] keeps one copy of
//! each number, is complete when 1..=LAST are all there, and gives the records in segment
//! order. A response that is not RMPP-active is one segment.

use std::collections::BTreeMap;

use softib_wire::mad::sa::{self, rmpp_flags};
use softib_wire::mad::{Method, MAD_LEN};

/// What PayloadLength counts per segment besides the records: the SA header (SM_Key,
/// AttributeOffset, reserved, ComponentMask).
pub const SA_HEADER_LEN: usize = 20;

/// The segments of one response received so far.
#[derive(Debug, Clone, Default)]
pub struct Reassembly {
    segments: BTreeMap<u32, [u8; MAD_LEN]>,
    /// The number of the segment flagged LAST (the first such one seen).
    last: Option<u32>,
}

/// A reassembled SA response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The MAD status of the first segment.
    pub status: u16,
    /// The response method (GetResp, GetTableResp, ...).
    pub method: Method,
    /// AttributeOffset: the record stride in 8-byte words (0 when there are no records).
    pub attr_offset: u16,
    /// The records, back to back at the stride: the SA data of every segment in order, cut to
    /// PayloadLength for a GetTableResp.
    pub payload: Vec<u8>,
}

impl Table {
    /// The records, each `attr_offset * 8` bytes (none when the stride is 0).
    pub fn records(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let stride = usize::from(self.attr_offset) * 8;
        let whole = if stride == 0 {
            &[][..]
        } else {
            &self.payload[..]
        };
        whole.chunks_exact(stride.max(1))
    }
}

impl Reassembly {
    /// Nothing received yet.
    pub fn new() -> Reassembly {
        Reassembly::default()
    }

    /// Adds one MAD of the response; returns whether it was taken. A MAD shorter than 256
    /// bytes or not an SA MAD, and a segment numbered 0, are not; a segment whose number was
    /// already received is taken and changes nothing.
    pub fn add(&mut self, mad: &[u8]) -> bool {
        let Some(bytes) = mad
            .get(..MAD_LEN)
            .and_then(|b| <[u8; MAD_LEN]>::try_from(b).ok())
        else {
            return false;
        };
        let Ok(r) = sa::Repr::parse(&sa::Packet::new_unchecked(&bytes[..])) else {
            return false;
        };
        let (number, last) = if r.rmpp.is_active() {
            (r.rmpp.data1, r.rmpp.flags & rmpp_flags::LAST != 0)
        } else {
            (1, true)
        };
        if number == 0 {
            return false;
        }
        if last && self.last.is_none() {
            self.last = Some(number);
        }
        self.segments.entry(number).or_insert(bytes);
        true
    }

    /// Whether segments 1 through the one flagged LAST have all arrived.
    pub fn is_complete(&self) -> bool {
        self.last.is_some_and(|last| {
            usize::try_from(last).is_ok_and(|n| self.segments.range(1..=last).count() == n)
        })
    }

    /// The segments 1..=LAST in order, once complete.
    pub fn segments(&self) -> Option<Vec<[u8; MAD_LEN]>> {
        let last = self.last.filter(|_| self.is_complete())?;
        Some(self.segments.range(1..=last).map(|(_, s)| *s).collect())
    }

    /// The response, once complete. PayloadLength larger than what the segments carry is
    /// cut to what they carry.
    pub fn table(&self) -> Option<Table> {
        let segments = self.segments()?;
        let first = sa::Repr::parse(&sa::Packet::new_unchecked(&segments.first()?[..])).ok()?;
        let mut payload = Vec::with_capacity(segments.len() * sa::DATA_LEN);
        for s in &segments {
            payload.extend_from_slice(sa::Packet::new_unchecked(&s[..]).data());
        }
        if first.header.method == Method::GetTableResp {
            let total = (first.rmpp.data2 as usize).saturating_sub(SA_HEADER_LEN * segments.len());
            payload.truncate(total);
        }
        Some(Table {
            status: first.header.status,
            method: first.header.method,
            attr_offset: first.attr_offset,
            payload,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use softib_wire::mad::sa::RmppHeader;
    use softib_wire::mad::AttrId;

    /// Segment `n` of `of` of a GetTableResp of 64-byte records, `total` record bytes.
    fn segment(n: u32, of: u32, total: usize) -> [u8; MAD_LEN] {
        let req = sa::Repr::request(Method::GetTable, 7, AttrId::PATH_RECORD, 0, &[]);
        let mut data = [0u8; sa::DATA_LEN];
        for (i, b) in data.iter_mut().enumerate() {
            *b = (n as usize * 1000 + i) as u8;
        }
        let mut r = req.response(0, 64, 1, &data);
        let len = if n == 1 {
            total + SA_HEADER_LEN * of as usize
        } else {
            0
        };
        r.rmpp = RmppHeader::data_segment(n, of, u32::try_from(len).unwrap());
        let mut b = [0u8; MAD_LEN];
        r.emit(&mut sa::Packet::new_unchecked(&mut b[..]));
        b
    }

    fn table_of(order: &[u32]) -> Option<Table> {
        let mut r = Reassembly::new();
        for &n in order {
            assert!(r.add(&segment(n, 3, 2 * 192 + 128)));
        }
        r.table()
    }

    #[test]
    fn segments_in_any_order_and_multiplicity_give_the_same_table() {
        let want = table_of(&[1, 2, 3]).unwrap();
        assert_eq!(want.payload.len(), 2 * 192 + 128);
        assert_eq!(want.records().count(), (2 * 192 + 128) / 64);
        for order in [&[3, 2, 1][..], &[2, 1, 1, 3, 2], &[1, 3, 3, 2]] {
            assert_eq!(table_of(order).as_ref(), Some(&want), "{order:?}");
        }
    }

    #[test]
    fn a_missing_segment_leaves_it_incomplete() {
        // Before: saquery returned at LAST, so a reordered LAST cut the table short, and a
        // duplicated segment doubled its records.
        assert_eq!(table_of(&[1, 3]), None);
        assert_eq!(table_of(&[3, 2]), None);
        assert_eq!(table_of(&[1, 2]), None);
        let mut r = Reassembly::new();
        assert!(!r.add(&[0u8; 100]), "short");
        assert!(!r.is_complete());
    }

    #[test]
    fn a_last_segment_numbered_u32_max_does_not_count_to_it() {
        let mut r = Reassembly::new();
        let mut s = segment(1, 1, 10);
        sa::Packet::new_unchecked(&mut s[..]).set_rmpp_data1(u32::MAX);
        r.add(&s);
        assert!(!r.is_complete());
        assert_eq!(r.table(), None);
    }
}
