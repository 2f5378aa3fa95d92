//! The domain's value types, shared by the protocol layer (`cni`) and the kernel layer (`kernel`), so that neither
//! borrows the other's: PCI addresses, MACs, IP networks, and the words of the PF-side settings of a VF.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// A PCI address in its canonical form `dddd:bb:dd.f` (lower case).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PciAddr(String);

impl PciAddr {
    /// Accepts `0000:3b:02.1` or the short `3b:02.1` (domain 0000).
    pub fn parse(s: &str) -> Result<Self, String> {
        let full = if s.matches(':').count() == 1 { format!("0000:{s}") } else { s.to_string() };
        let b = full.as_bytes();
        let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
        let ok = b.len() == 12
            && hex(0..4)
            && b[4] == b':'
            && hex(5..7)
            && b[7] == b':'
            && hex(8..10)
            && b[10] == b'.'
            && (b'0'..=b'7').contains(&b[11]);
        if ok {
            Ok(PciAddr(full.to_ascii_lowercase()))
        } else {
            Err("is not a PCI address like 0000:3b:02.1".to_string())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An Ethernet MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }

    /// The first six bytes of a kernel address attribute, if there are six.
    pub fn from_slice(b: &[u8]) -> Option<Mac> {
        b.get(..6).and_then(|s| <[u8; 6]>::try_from(s).ok()).map(Mac)
    }
}

impl FromStr for Mac {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let mut out = [0u8; 6];
        if parts.len() != 6 {
            return Err("is not a MAC address like 02:00:00:00:00:01".to_string());
        }
        for (o, p) in out.iter_mut().zip(&parts) {
            if p.len() != 2 {
                return Err("is not a MAC address like 02:00:00:00:00:01".to_string());
            }
            *o = u8::from_str_radix(p, 16).map_err(|_| "is not a MAC address like 02:00:00:00:00:01".to_string())?;
        }
        Ok(Mac(out))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
    }
}

impl Serialize for Mac {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mac {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An address with its prefix length, as CNI writes it (`10.1.0.2/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl IpNet {
    pub fn max_prefix(addr: &IpAddr) -> u8 {
        if addr.is_ipv4() {
            32
        } else {
            128
        }
    }
}

impl FromStr for IpNet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s.split_once('/').ok_or_else(|| format!("{s:?} is not an address/prefix"))?;
        let addr: IpAddr = a.parse().map_err(|_| format!("{s:?} is not an address/prefix"))?;
        let prefix: u8 = p.parse().map_err(|_| format!("{s:?} has a bad prefix length"))?;
        if prefix > IpNet::max_prefix(&addr) {
            return Err(format!("{s:?} has a bad prefix length"));
        }
        Ok(IpNet { addr, prefix })
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Serialize for IpNet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for IpNet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VlanProto {
    #[serde(rename = "802.1q")]
    Dot1Q,
    #[serde(rename = "802.1ad")]
    Dot1Ad,
}

impl VlanProto {
    /// Its words, in the configuration (`vlanProto`) and the record: `802.1q`, `802.1ad`.
    pub fn as_str(self) -> &'static str {
        match self {
            VlanProto::Dot1Q => "802.1q",
            VlanProto::Dot1Ad => "802.1ad",
        }
    }

    /// The words [`VlanProto::as_str`] writes; `upper` also takes them in upper case (`802.1Q`, as `ip link` writes
    /// them).
    pub fn parse(s: &str, upper: bool) -> Option<VlanProto> {
        [VlanProto::Dot1Q, VlanProto::Dot1Ad]
            .into_iter()
            .find(|p| s == p.as_str() || (upper && s == p.as_str().to_ascii_uppercase()))
    }

    /// The ethertype the kernel wants in `ifla_vf_vlan_info`.
    pub fn ethertype(self) -> u16 {
        match self {
            VlanProto::Dot1Q => 0x8100,
            VlanProto::Dot1Ad => 0x88a8,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    Auto,
    Enable,
    Disable,
}

impl LinkState {
    /// Its words, in the configuration (`link_state`), the record and the logs: `auto`, `enable`, `disable`.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Auto => "auto",
            LinkState::Enable => "enable",
            LinkState::Disable => "disable",
        }
    }

    pub fn parse(s: &str) -> Option<LinkState> {
        [LinkState::Auto, LinkState::Enable, LinkState::Disable].into_iter().find(|l| l.as_str() == s)
    }
}

impl fmt::Display for LinkState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A switch in the configuration's words (`spoofchk`, `trust`): `on` or `off`.
pub fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The words [`on_off`] writes.
pub fn parse_on_off(s: &str) -> Option<bool> {
    [true, false].into_iter().find(|b| on_off(*b) == s)
}

/// An InfiniBand GUID as text: `00:11:22:33:44:55:66:77`.
pub fn guid_str(g: u64) -> String {
    g.to_be_bytes().iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// The text [`guid_str`] writes: eight pairs of hex digits.
pub fn parse_guid(s: &str) -> Option<u64> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 8 || parts.iter().any(|p| p.len() != 2 || !p.bytes().all(|b| b.is_ascii_hexdigit())) {
        return None;
    }
    parts.iter().try_fold(0u64, |g, p| Some((g << 8) | u64::from(u8::from_str_radix(p, 16).ok()?)))
}

/// A kernel error that came with an extended-ack message: the errno and the kernel's own words. Both layers read
/// it: the kernel layer makes it, the flow decides on its errno and the protocol layer reports it.
#[derive(Debug)]
pub struct KernelError {
    pub errno: i32,
    pub ext_ack: String,
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (kernel: {})", std::io::Error::from_raw_os_error(self.errno), self.ext_ack)
    }
}

impl std::error::Error for KernelError {}

/// The errno behind an error, whether it is a plain OS error or a kernel error with an extended ack.
pub fn errno(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| e.get_ref()?.downcast_ref::<KernelError>().map(|k| k.errno))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_of_a_setting_read_back_as_they_are_written() {
        for p in [VlanProto::Dot1Q, VlanProto::Dot1Ad] {
            assert_eq!(VlanProto::parse(p.as_str(), false), Some(p));
            assert_eq!(VlanProto::parse(&p.as_str().to_ascii_uppercase(), true), Some(p));
        }
        assert_eq!(VlanProto::parse("802.1Q", false), None, "the record takes lower case only");
        assert_eq!(VlanProto::parse("802.1x", true), None);
        for l in [LinkState::Auto, LinkState::Enable, LinkState::Disable] {
            assert_eq!(LinkState::parse(&l.to_string()), Some(l));
        }
        assert_eq!(LinkState::parse("Enable"), None);
        assert_eq!((on_off(true), on_off(false)), ("on", "off"));
        assert_eq!((parse_on_off("on"), parse_on_off("off"), parse_on_off("yes")), (Some(true), Some(false), None));
        let g = 0x0011_2233_4455_66ff;
        assert_eq!(guid_str(g), "00:11:22:33:44:55:66:ff");
        assert_eq!(parse_guid(&guid_str(g)), Some(g));
        for bad in
            ["00:11:22:33:44:55:66", "0:11:22:33:44:55:66:77:8", "00:11:22:33:44:55:66:7g", "+0:11:22:33:44:55:66:77"]
        {
            assert_eq!(parse_guid(bad), None, "{bad}");
        }
    }

    #[test]
    fn pci_addresses() {
        assert_eq!(PciAddr::parse("0000:3B:02.1").unwrap().as_str(), "0000:3b:02.1");
        assert_eq!(PciAddr::parse("3b:02.1").unwrap().as_str(), "0000:3b:02.1");
        for bad in ["", "3b:02", "0000:3b:02.8", "0000:3b:0g.1", "0000-3b:02.1", "00000:3b:02.1"] {
            assert!(PciAddr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn macs() {
        let m: Mac = "02:AB:00:00:00:01".parse().unwrap();
        assert_eq!(m.to_string(), "02:ab:00:00:00:01");
        assert!(!m.is_multicast());
        assert!("01:00:5e:00:00:01".parse::<Mac>().unwrap().is_multicast());
        for bad in ["02:ab:00:00:00", "02:ab:00:00:00:001", "zz:ab:00:00:00:01", ""] {
            assert!(bad.parse::<Mac>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ipnets() {
        let n: IpNet = "10.1.0.2/24".parse().unwrap();
        assert_eq!(n.prefix, 24);
        assert_eq!(n.to_string(), "10.1.0.2/24");
        assert!("fd00::1/64".parse::<IpNet>().is_ok());
        assert!("10.1.0.2/33".parse::<IpNet>().is_err());
        assert!("10.1.0.2".parse::<IpNet>().is_err());
    }
}
