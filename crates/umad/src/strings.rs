//! The names libibumad gives management classes, methods, attributes and MAD status codes
//! (`umad_str.h`), for programs that print them: IBA §13.4.4 (classes), §13.4.5 (methods),
//! §14.2.5 and §15.2.5 (SMP and SA attributes), §13.4.7 and §15.2.1.1 (status codes).

use std::ffi::{c_char, CStr};

fn c(s: &'static CStr) -> *const c_char {
    s.as_ptr()
}

/// `umad_class_str`.
pub(crate) extern "C" fn umad_class_str(class: u8) -> *const c_char {
    c(match class {
        0x01 => c"Subn",
        0x81 => c"SubnDirectedRoute",
        0x03 => c"Subn Administration",
        0x04 => c"Performance",
        0x05 => c"BaseManagement",
        0x06 => c"Device",
        0x07 => c"Communication Management",
        0x08 => c"SNMP",
        0x21 => c"CC",
        0x09..=0x0f | 0x30..=0x4f => c"Vendor",
        0x10 => c"Application",
        _ => c"<unknown>",
    })
}

/// `umad_method_str`.
pub(crate) extern "C" fn umad_method_str(_class: u8, method: u8) -> *const c_char {
    c(match method {
        0x01 => c"Get",
        0x02 => c"Set",
        0x81 => c"GetResp",
        0x03 => c"Send",
        0x05 => c"Trap",
        0x06 => c"Report",
        0x86 => c"ReportResp",
        0x07 => c"TrapRepress",
        0x12 => c"GetTable",
        0x92 => c"GetTableResp",
        0x13 => c"GetTraceTable",
        0x14 => c"GetMulti",
        0x94 => c"GetMultiResp",
        0x15 => c"Delete",
        0x95 => c"DeleteResp",
        _ => c"<unknown method>",
    })
}

/// `umad_attribute_str` (`attr_id` in network order).
pub(crate) extern "C" fn umad_attribute_str(class: u8, attr_id: u16) -> *const c_char {
    let id = u16::from_be(attr_id);
    let common = match id {
        0x0001 => Some(c"ClassPortInfo"),
        0x0002 => Some(c"Notice"),
        0x0003 => Some(c"InformInfo"),
        _ => None,
    };
    if let Some(s) = common {
        return c(s);
    }
    c(match (class, id) {
        (0x01 | 0x81, 0x0010) => c"NodeDescription",
        (0x01 | 0x81, 0x0011) => c"NodeInfo",
        (0x01 | 0x81, 0x0012) => c"SwitchInfo",
        (0x01 | 0x81, 0x0014) => c"GUIDInfo",
        (0x01 | 0x81, 0x0015) => c"PortInfo",
        (0x01 | 0x81, 0x0016) => c"P_KeyTable",
        (0x01 | 0x81, 0x0017) => c"SLtoVLMappingTable",
        (0x01 | 0x81, 0x0018) => c"VLArbitrationTable",
        (0x01 | 0x81, 0x0019) => c"LinearForwardingTable",
        (0x01 | 0x81, 0x001a) => c"RandomForwardingTable",
        (0x01 | 0x81, 0x001b) => c"MulticastForwardingTable",
        (0x01 | 0x81, 0x0020) => c"SMInfo",
        (0x01 | 0x81, 0x0030) => c"VendorDiag",
        (0x01 | 0x81, 0x0031) => c"LedInfo",
        (0x03, 0x0011) => c"NodeRecord",
        (0x03, 0x0012) => c"PortInfoRecord",
        (0x03, 0x0013) => c"SLtoVLMappingTableRecord",
        (0x03, 0x0014) => c"SwitchInfoRecord",
        (0x03, 0x0015) => c"LinearForwardingTableRecord",
        (0x03, 0x0017) => c"MulticastForwardingTableRecord",
        (0x03, 0x0018) => c"SMInfoRecord",
        (0x03, 0x0020) => c"LinkRecord",
        (0x03, 0x0030) => c"GuidInfoRecord",
        (0x03, 0x0031) => c"ServiceRecord",
        (0x03, 0x0033) => c"P_KeyTableRecord",
        (0x03, 0x0035) => c"PathRecord",
        (0x03, 0x0036) => c"VLArbitrationTableRecord",
        (0x03, 0x0038) => c"MCMemberRecord",
        (0x03, 0x0039) => c"TraceRecord",
        (0x03, 0x003a) => c"MultiPathRecord",
        (0x03, 0x00f3) => c"InformInfoRecord",
        (0x04, 0x0012) => c"PortCounters",
        (0x04, 0x0011) => c"PortSamplesResult",
        (0x04, 0x0010) => c"PortSamplesControl",
        (0x04, 0x001d) => c"PortCountersExtended",
        _ => c"<unknown attribute>",
    })
}

/// `umad_common_mad_status_str` (`status` in network order).
pub(crate) extern "C" fn umad_common_mad_status_str(status: u16) -> *const c_char {
    let s = u16::from_be(status);
    if s & 0x0001 != 0 {
        return c(c"Busy");
    }
    if s & 0x0002 != 0 {
        return c(c"Redirection required");
    }
    c(match (s >> 2) & 0x7 {
        0 => c"Success",
        1 => c"Bad Version",
        2 => c"Method Not Supported",
        3 => c"Method/Attribute Combo Not Supported",
        7 => c"Invalid Attribute/Modifier Field",
        _ => c"Undefined Error",
    })
}

/// `umad_sa_mad_status_str` (`status` in network order).
pub(crate) extern "C" fn umad_sa_mad_status_str(status: u16) -> *const c_char {
    c(match (u16::from_be(status) >> 8) & 0xff {
        0 => c"Success",
        1 => c"No Resources",
        2 => c"Request Invalid",
        3 => c"No Records",
        4 => c"Too Many Records",
        5 => c"Invalid GID",
        6 => c"Insufficient Components",
        7 => c"Request Denied",
        8 => c"Priority Not Available",
        _ => c"Undefined Error",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: the functions return static C strings.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn names_follow_the_spec() {
        assert_eq!(s(umad_class_str(0x81)), "SubnDirectedRoute");
        assert_eq!(s(umad_method_str(0x03, 0x92)), "GetTableResp");
        assert_eq!(s(umad_attribute_str(0x03, 0x0035u16.to_be())), "PathRecord");
        assert_eq!(s(umad_attribute_str(0x01, 0x0015u16.to_be())), "PortInfo");
        assert_eq!(
            s(umad_common_mad_status_str(0x000cu16.to_be())),
            "Method/Attribute Combo Not Supported"
        );
        assert_eq!(s(umad_sa_mad_status_str(0x0300u16.to_be())), "No Records");
    }
}
