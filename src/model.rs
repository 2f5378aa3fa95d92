//! The domain's value types, shared by the protocol layer (`cni`) and the kernel layer (`kernel`), so that neither
//! borrows the other's: PCI addresses, MACs, IP networks, and the PF-side settings of a VF.

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum VlanProto {
    #[serde(rename = "802.1q")]
    Dot1Q,
    #[serde(rename = "802.1ad")]
    Dot1Ad,
}

impl VlanProto {
    /// The ethertype the kernel wants in `ifla_vf_vlan_info`.
    pub fn ethertype(self) -> u16 {
        match self {
            VlanProto::Dot1Q => 0x8100,
            VlanProto::Dot1Ad => 0x88a8,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    Auto,
    Enable,
    Disable,
}

/// The PF-side settings of a VF that the configuration asks for; `None` means "leave as it is".
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VfSettings {
    pub mac: Option<Mac>,
    pub vlan: Option<u16>,
    pub vlan_qos: Option<u8>,
    pub vlan_proto: Option<VlanProto>,
    pub spoofchk: Option<bool>,
    pub trust: Option<bool>,
    pub link_state: Option<LinkState>,
    pub min_tx_rate: Option<u32>,
    pub max_tx_rate: Option<u32>,
    /// InfiniBand node and port GUID of the VF.
    #[serde(default)]
    pub guid: Option<u64>,
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
