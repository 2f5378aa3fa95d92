//! NETLINK_ROUTE operations the plugin needs: links, netns moves, VF info, addresses, routes.

use super::netlink::{errno, Kind, Route, Socket};
use crate::model::{IpNet, Mac};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkExtentMask, LinkFlags, LinkMessage, Prop, VfInfo};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage as Rt};
use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;

pub type RouteSocket = Socket<Route>;

/// What the plugin knows of a link.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub mac: Option<Mac>,
    pub mtu: u32,
    pub up: bool,
    #[serde(default)]
    pub altnames: Vec<String>,
    /// The bus address of the device behind it (a PCI address for a VF), where the kernel reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

impl Link {
    fn from_msg(m: &LinkMessage) -> Link {
        let mut l = Link {
            index: m.header.index,
            name: String::new(),
            mac: None,
            mtu: 0,
            up: m.header.flags.contains(LinkFlags::Up),
            altnames: Vec::new(),
            parent: None,
        };
        for a in &m.attributes {
            match a {
                LinkAttribute::IfName(n) => l.name = n.clone(),
                LinkAttribute::Address(b) => l.mac = Mac::from_slice(b),
                LinkAttribute::Mtu(v) => l.mtu = *v,
                LinkAttribute::ParentDevName(p) => l.parent = Some(p.clone()),
                LinkAttribute::PropList(props) => {
                    for p in props {
                        if let Prop::AltIfName(n) = p {
                            l.altnames.push(n.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        l
    }
}

fn link_msg(index: u32) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    m
}

fn is_not_found(e: &io::Error) -> bool {
    matches!(errno(e), Some(libc::ENODEV) | Some(libc::ENOENT))
}

/// A change request for one link: its attributes and, optionally, the up flag.
pub fn set_msg(index: u32, attrs: Vec<LinkAttribute>, up: Option<bool>) -> LinkMessage {
    let mut m = link_msg(index);
    if let Some(up) = up {
        m.header.change_mask = LinkFlags::Up;
        if up {
            m.header.flags = LinkFlags::Up;
        }
    }
    m.attributes = attrs;
    m
}

/// The one message that moves a link into the namespace `ns_fd` and names it `name` there.
pub fn move_msg(index: u32, ns_fd: RawFd, name: &str) -> LinkMessage {
    set_msg(index, vec![LinkAttribute::NetNsFd(ns_fd), LinkAttribute::IfName(name.to_string())], None)
}

impl Socket<Route> {
    fn get_link(&mut self, mut m: LinkMessage, ext: Vec<LinkExtentMask>) -> io::Result<Option<LinkMessage>> {
        m.attributes.push(LinkAttribute::ExtMask(ext));
        match self.request(Rt::GetLink(m), Kind::Get) {
            Ok(replies) => Ok(replies.into_iter().find_map(|r| match r {
                Rt::NewLink(l) => Some(l),
                _ => None,
            })),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn link_by_name(&mut self, name: &str) -> io::Result<Option<Link>> {
        let mut m = link_msg(0);
        m.attributes.push(LinkAttribute::IfName(name.to_string()));
        Ok(self.get_link(m, vec![LinkExtentMask::SkipStats])?.as_ref().map(Link::from_msg))
    }

    pub fn link_by_index(&mut self, index: u32) -> io::Result<Option<Link>> {
        Ok(self.get_link(link_msg(index), vec![LinkExtentMask::SkipStats])?.as_ref().map(Link::from_msg))
    }

    /// Whether the link has carrier (IFLA_CARRIER); `None` when it is gone.
    pub fn carrier(&mut self, index: u32) -> io::Result<Option<bool>> {
        let msg = self.get_link(link_msg(index), vec![LinkExtentMask::SkipStats])?;
        Ok(msg.map(|m| m.attributes.iter().any(|a| matches!(a, LinkAttribute::Carrier(1)))))
    }

    /// Every link of the socket's namespace.
    pub fn links(&mut self) -> io::Result<Vec<Link>> {
        let mut m = link_msg(0);
        m.attributes.push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
        let replies = self.request(Rt::GetLink(m), Kind::Dump)?;
        Ok(replies
            .iter()
            .filter_map(|r| match r {
                Rt::NewLink(l) => Some(Link::from_msg(l)),
                _ => None,
            })
            .collect())
    }

    /// The VF table of a PF as the kernel reports it (`RTEXT_FILTER_VF`); empty when it has none.
    pub fn vf_table(&mut self, pf_index: u32) -> io::Result<Vec<Vec<VfInfo>>> {
        let msg = self.get_link(link_msg(pf_index), vec![LinkExtentMask::Vf, LinkExtentMask::SkipStats])?;
        let mut out = Vec::new();
        for a in msg.map(|m| m.attributes).unwrap_or_default() {
            if let LinkAttribute::VfInfoList(list) = a {
                out.extend(list.into_iter().map(|v| v.0));
            }
        }
        Ok(out)
    }

    pub fn set_link(&mut self, index: u32, attrs: Vec<LinkAttribute>, up: Option<bool>) -> io::Result<()> {
        self.request(Rt::SetLink(set_msg(index, attrs, up)), Kind::Change).map(drop)
    }

    /// Moves a link into another namespace and renames it there, in one step.
    pub fn move_link(&mut self, index: u32, ns_fd: RawFd, name: &str) -> io::Result<()> {
        self.request(Rt::NewLink(move_msg(index, ns_fd, name)), Kind::Change).map(drop)
    }

    pub fn add_altname(&mut self, index: u32, name: &str) -> io::Result<()> {
        let m = set_msg(index, vec![LinkAttribute::PropList(vec![Prop::AltIfName(name.to_string())])], None);
        self.request(Rt::NewLinkProp(m), Kind::Change).map(drop)
    }

    pub fn add_address(&mut self, index: u32, net: IpNet) -> io::Result<()> {
        let mut m = AddressMessage::default();
        m.header.family = family(&net.addr);
        m.header.prefix_len = net.prefix;
        m.header.index = index;
        m.attributes.push(AddressAttribute::Local(net.addr));
        m.attributes.push(AddressAttribute::Address(net.addr));
        self.request(Rt::NewAddress(m), Kind::Create).map(drop)
    }

    pub fn addresses(&mut self, index: u32) -> io::Result<Vec<IpNet>> {
        let mut out = Vec::new();
        for r in self.request(Rt::GetAddress(AddressMessage::default()), Kind::Dump)? {
            let Rt::NewAddress(a) = r else { continue };
            if a.header.index != index {
                continue;
            }
            for attr in &a.attributes {
                if let AddressAttribute::Address(ip) = attr {
                    out.push(IpNet { addr: *ip, prefix: a.header.prefix_len });
                }
            }
        }
        Ok(out)
    }

    /// The IPv6 addresses of a link still in duplicate address detection, and those that failed it.
    pub fn dad_state(&mut self, index: u32) -> io::Result<(Vec<IpNet>, Vec<IpNet>)> {
        let (mut tentative, mut failed) = (Vec::new(), Vec::new());
        for r in self.request(Rt::GetAddress(AddressMessage::default()), Kind::Dump)? {
            let Rt::NewAddress(a) = r else { continue };
            if a.header.index != index || a.header.family != AddressFamily::Inet6 {
                continue;
            }
            let mut flags = AddressFlags::from_bits_retain(u32::from(a.header.flags.bits()));
            let mut addr = None;
            for attr in &a.attributes {
                match attr {
                    AddressAttribute::Flags(f) => flags |= *f,
                    AddressAttribute::Address(ip) => addr = Some(IpNet { addr: *ip, prefix: a.header.prefix_len }),
                    _ => {}
                }
            }
            let Some(addr) = addr else { continue };
            if flags.contains(AddressFlags::Dadfailed) {
                failed.push(addr);
            } else if flags.contains(AddressFlags::Tentative) {
                tentative.push(addr);
            }
        }
        Ok((tentative, failed))
    }

    pub fn add_route(&mut self, index: u32, dst: IpNet, gw: Option<IpAddr>, priority: Option<u32>) -> io::Result<()> {
        let mut m = RouteMessage::default();
        m.header.address_family = family(&dst.addr);
        m.header.destination_prefix_length = dst.prefix;
        m.header.table = RouteHeader::RT_TABLE_MAIN;
        m.header.protocol = RouteProtocol::Boot;
        m.header.kind = RouteType::Unicast;
        m.header.scope = if gw.is_some() { RouteScope::Universe } else { RouteScope::Link };
        if dst.prefix > 0 {
            m.attributes.push(RouteAttribute::Destination(RouteAddress::from(dst.addr)));
        }
        if let Some(gw) = gw {
            m.attributes.push(RouteAttribute::Gateway(RouteAddress::from(gw)));
        }
        if let Some(p) = priority {
            m.attributes.push(RouteAttribute::Priority(p));
        }
        m.attributes.push(RouteAttribute::Oif(index));
        self.request(Rt::NewRoute(m), Kind::Create).map(drop).or_else(|e| {
            // A route the kernel already added with the address is fine.
            if errno(&e) == Some(libc::EEXIST) {
                Ok(())
            } else {
                Err(e)
            }
        })
    }
}

fn family(ip: &IpAddr) -> AddressFamily {
    if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::netlink::encode;

    #[test]
    fn move_is_one_newlink_with_netns_fd_and_name() {
        let bytes = encode(Rt::NewLink(move_msg(7, 5, "net1")), Kind::Change, 1);
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &52u32.to_ne_bytes()[..], &16u16.to_ne_bytes(), &5u16.to_ne_bytes(), &1u32.to_ne_bytes(), &0u32.to_ne_bytes(),
            // ifinfomsg: family, pad, type, index 7, flags, change
            &[0, 0], &0u16.to_ne_bytes(), &7i32.to_ne_bytes(), &0u32.to_ne_bytes(), &0u32.to_ne_bytes(),
            // IFLA_NET_NS_FD (28) = 5
            &8u16.to_ne_bytes(), &28u16.to_ne_bytes(), &5u32.to_ne_bytes(),
            // IFLA_IFNAME (3) = "net1\0", padded to 4
            &9u16.to_ne_bytes(), &3u16.to_ne_bytes(), b"net1\0", &[0, 0, 0],
        ]
        .concat();
        assert_eq!(bytes, want);
    }

    #[test]
    fn set_link_up_sets_flag_and_change_mask() {
        let bytes = encode(Rt::SetLink(set_msg(3, vec![LinkAttribute::Mtu(9000)], Some(true))), Kind::Change, 2);
        assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), 19, "RTM_SETLINK");
        assert_eq!(u32::from_ne_bytes(bytes[24..28].try_into().unwrap()), 1, "IFF_UP in flags");
        assert_eq!(u32::from_ne_bytes(bytes[28..32].try_into().unwrap()), 1, "IFF_UP in change mask");
        assert_eq!(
            &bytes[32..40],
            &[&8u16.to_ne_bytes()[..], &4u16.to_ne_bytes(), &9000u32.to_ne_bytes()].concat()[..]
        );
    }
}
