//! NETLINK_ROUTE operations the plugin needs: links, netns moves, VF info, addresses, routes.

use super::netlink::{errno, Kind, Route, Socket};
use crate::model::{IpNet, Mac};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkExtentMask, LinkFlags, LinkMessage, Prop, VfInfo};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteMetric, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage as Rt};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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

/// The main routing table: where a route without a table goes.
pub const TABLE_MAIN: u32 = 254;

/// A route as the plugin installs it and as the kernel shows it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteEntry {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    /// The link it leaves through; `None` for one that goes through none (blackhole) or through several.
    pub oif: Option<u32>,
    pub table: u32,
    /// The metric; `None`: the kernel's default (0 for IPv4, 1024 for IPv6).
    pub priority: Option<u32>,
    /// RT_SCOPE_*; `None`: global with a gateway, link without. IPv6 routes have no scope.
    pub scope: Option<u8>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub kind: RouteType,
}

/// What [`Socket::add_route`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteAdd {
    /// The route is in its table as asked.
    Added,
    /// Another route of the same key (destination, metric, table) holds the place: the pod's, left as it is.
    Taken(RouteEntry),
}

impl RouteEntry {
    /// A unicast route to `dst` through link `oif`, in the main table, with nothing else set.
    pub fn through(oif: u32, dst: IpNet) -> RouteEntry {
        RouteEntry {
            dst,
            gw: None,
            oif: Some(oif),
            table: TABLE_MAIN,
            priority: None,
            scope: None,
            mtu: None,
            advmss: None,
            kind: RouteType::Unicast,
        }
    }

    fn is_ipv4(&self) -> bool {
        self.dst.addr.is_ipv4()
    }

    fn metric(&self) -> u32 {
        self.priority.unwrap_or(if self.is_ipv4() { 0 } else { 1024 })
    }

    fn scope_or_default(&self) -> u8 {
        self.scope.unwrap_or(self.usual_scope())
    }

    /// What `ip route` adds without a scope: global with a gateway, link without.
    fn usual_scope(&self) -> u8 {
        if self.gw.is_some() {
            RT_SCOPE_UNIVERSE
        } else {
            RT_SCOPE_LINK
        }
    }

    /// What makes the kernel refuse a second route with `EEXIST`: the table, the destination, the metric.
    pub fn same_key(&self, other: &RouteEntry) -> bool {
        self.table == other.table && network(&self.dst) == network(&other.dst) && self.metric() == other.metric()
    }

    /// Whether this route sends what `want` would send the way `want` would: the same destination, kind, link
    /// and gateway, whatever its table, metric and route metrics.
    pub fn same_path(&self, want: &RouteEntry) -> bool {
        network(&self.dst) == network(&want.dst) && self.kind == want.kind && self.oif == want.oif && self.gw == want.gw
    }

    /// Whether this route, as the kernel shows it, is `want`: the same key and path, and every field `want`
    /// sets (the scope only for IPv4).
    pub fn holds(&self, want: &RouteEntry) -> bool {
        self.same_key(want)
            && self.same_path(want)
            && want.mtu.is_none_or(|m| self.mtu == Some(m))
            && want.advmss.is_none_or(|m| self.advmss == Some(m))
            && (!self.is_ipv4() || self.scope_or_default() == want.scope_or_default())
    }

    /// The route in `ip route` words, its link named `dev`.
    pub fn describe(&self, dev: Option<&str>) -> String {
        let mut out = match self.kind {
            RouteType::Unicast => String::new(),
            k => format!("{} ", format!("{k:?}").to_lowercase()),
        };
        out.push_str(&network(&self.dst).to_string());
        if let Some(gw) = self.gw {
            out.push_str(&format!(" via {gw}"));
        }
        match (dev, self.oif) {
            (Some(d), _) => out.push_str(&format!(" dev {d}")),
            (None, Some(i)) => out.push_str(&format!(" dev #{i}")),
            (None, None) => {}
        }
        out.push_str(&format!(" table {} metric {}", table_name(self.table), self.metric()));
        if let Some(m) = self.mtu {
            out.push_str(&format!(" mtu {m}"));
        }
        if let Some(m) = self.advmss {
            out.push_str(&format!(" advmss {m}"));
        }
        match self.scope.filter(|s| self.is_ipv4() && *s != self.usual_scope()) {
            Some(RT_SCOPE_UNIVERSE) => out.push_str(" scope global"),
            Some(RT_SCOPE_LINK) => out.push_str(" scope link"),
            Some(254) => out.push_str(" scope host"),
            Some(s) => out.push_str(&format!(" scope {s}")),
            None => {}
        }
        out
    }

    fn header(&self) -> RouteMessage {
        let mut m = RouteMessage::default();
        m.header.address_family = family(&self.dst.addr);
        m.header.destination_prefix_length = self.dst.prefix;
        // Tables past 255 exist only as RTA_TABLE.
        m.header.table = u8::try_from(self.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
        if self.dst.prefix > 0 {
            m.attributes.push(RouteAttribute::Destination(RouteAddress::from(self.dst.addr)));
        }
        m.attributes.push(RouteAttribute::Table(self.table));
        if let Some(gw) = self.gw {
            m.attributes.push(RouteAttribute::Gateway(RouteAddress::from(gw)));
        }
        if let Some(p) = self.priority {
            m.attributes.push(RouteAttribute::Priority(p));
        }
        if let Some(i) = self.oif {
            m.attributes.push(RouteAttribute::Oif(i));
        }
        m
    }

    /// RTM_NEWROUTE's message.
    fn msg(&self) -> RouteMessage {
        let mut m = self.header();
        m.header.protocol = RouteProtocol::Boot;
        m.header.kind = self.kind;
        m.header.scope = RouteScope::from(self.scope_or_default());
        let metrics: Vec<RouteMetric> =
            [self.mtu.map(RouteMetric::Mtu), self.advmss.map(RouteMetric::Advmss)].into_iter().flatten().collect();
        if !metrics.is_empty() {
            m.attributes.push(RouteAttribute::Metrics(metrics));
        }
        m
    }

    /// RTM_DELROUTE's message for this route, whoever added it (any protocol, any scope).
    fn del_msg(&self) -> RouteMessage {
        let mut m = self.header();
        m.header.scope = RouteScope::NoWhere;
        m
    }

    fn from_msg(m: &RouteMessage) -> Option<RouteEntry> {
        let ipv4 = match m.header.address_family {
            AddressFamily::Inet => true,
            AddressFamily::Inet6 => false,
            _ => return None,
        };
        if m.header.tos != 0 {
            return None;
        }
        let any: IpAddr = if ipv4 { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
        let mut r = RouteEntry {
            dst: IpNet { addr: any, prefix: m.header.destination_prefix_length },
            gw: None,
            oif: None,
            table: u32::from(m.header.table),
            priority: None,
            scope: ipv4.then(|| u8::from(m.header.scope)),
            mtu: None,
            advmss: None,
            kind: m.header.kind,
        };
        for a in &m.attributes {
            match a {
                RouteAttribute::Destination(d) => r.dst.addr = ip_of(d)?,
                RouteAttribute::Gateway(g) => r.gw = ip_of(g),
                RouteAttribute::Oif(i) => r.oif = Some(*i),
                RouteAttribute::Table(t) => r.table = *t,
                RouteAttribute::Priority(p) => r.priority = Some(*p),
                RouteAttribute::Metrics(ms) => {
                    for x in ms {
                        match x {
                            RouteMetric::Mtu(v) => r.mtu = Some(*v),
                            RouteMetric::Advmss(v) => r.advmss = Some(*v),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Some(r)
    }
}

const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;

fn ip_of(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some((*v4).into()),
        RouteAddress::Inet6(v6) => Some((*v6).into()),
        _ => None,
    }
}

/// `net` with its host bits cleared, as the kernel keeps a destination.
pub fn network(net: &IpNet) -> IpNet {
    let addr = match net.addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(net.prefix.min(32))).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(net.prefix.min(128))).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
        }
    };
    IpNet { addr, prefix: net.prefix }
}

/// A table's name as `ip route` prints it.
pub fn table_name(table: u32) -> String {
    match table {
        253 => "default".into(),
        TABLE_MAIN => "main".into(),
        255 => "local".into(),
        t => t.to_string(),
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

    /// Installs `r` (`NLM_F_EXCL`). A route of the same key already in its table (destination, metric, table:
    /// what makes the kernel answer `EEXIST`) on the same path (link and gateway) is kept, or replaced when it
    /// lacks what `r` asks for (the subnet's own route, which the kernel added with the address, given an MTU);
    /// one on another path holds the place, and is returned untouched as [`RouteAdd::Taken`].
    pub fn add_route(&mut self, r: &RouteEntry) -> io::Result<RouteAdd> {
        let e = match self.request(Rt::NewRoute(r.msg()), Kind::Create) {
            Ok(_) => return Ok(RouteAdd::Added),
            Err(e) if errno(&e) == Some(libc::EEXIST) => e,
            Err(e) => return Err(e),
        };
        let Some(held) = self.routes(r.dst.addr.is_ipv4())?.into_iter().find(|h| h.same_key(r)) else {
            return Err(e);
        };
        if !held.same_path(r) {
            return Ok(RouteAdd::Taken(held));
        }
        if !held.holds(r) {
            self.request(Rt::DelRoute(held.del_msg()), Kind::Change)?;
            self.request(Rt::NewRoute(r.msg()), Kind::Create)?;
        }
        Ok(RouteAdd::Added)
    }

    /// Every route of one family, in every table of the socket's namespace.
    pub fn routes(&mut self, ipv4: bool) -> io::Result<Vec<RouteEntry>> {
        let mut m = RouteMessage::default();
        m.header.address_family = if ipv4 { AddressFamily::Inet } else { AddressFamily::Inet6 };
        let replies = self.request(Rt::GetRoute(m), Kind::Dump)?;
        Ok(replies
            .iter()
            .filter_map(|r| match r {
                Rt::NewRoute(m) => RouteEntry::from_msg(m),
                _ => None,
            })
            .collect())
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

    fn route(dst: &str, gw: Option<&str>) -> RouteEntry {
        RouteEntry { gw: gw.map(|g| g.parse().unwrap()), ..RouteEntry::through(3, dst.parse().unwrap()) }
    }

    #[test]
    fn a_route_past_table_255_goes_as_rta_table_with_its_metrics_and_reads_back_the_same() {
        let want = RouteEntry {
            table: 300,
            priority: Some(7),
            mtu: Some(1400),
            advmss: Some(1360),
            ..route("10.78.0.0/16", Some("10.77.0.1"))
        };
        let bytes = encode(Rt::NewRoute(want.msg()), Kind::Create, 1);
        assert_eq!(bytes[16 + 4], RouteHeader::RT_TABLE_UNSPEC, "rtm_table cannot hold 300");
        let msg = want.msg();
        assert!(msg.attributes.contains(&RouteAttribute::Table(300)));
        assert!(msg
            .attributes
            .contains(&RouteAttribute::Metrics(vec![RouteMetric::Mtu(1400), RouteMetric::Advmss(1360)])));
        let back = RouteEntry::from_msg(&msg).unwrap();
        assert!(back.holds(&want), "{back:?}");
        assert_eq!(
            back.describe(Some("net1")),
            "10.78.0.0/16 via 10.77.0.1 dev net1 table 300 metric 7 mtu 1400 advmss 1360"
        );
    }

    #[test]
    fn the_kernels_key_is_table_destination_and_metric_with_each_familys_default_metric() {
        let ours = route("10.78.0.0/16", Some("10.77.0.1"));
        let eth0 = RouteEntry { oif: Some(2), priority: Some(0), ..route("10.78.1.0/16", Some("10.10.0.1")) };
        assert!(eth0.same_key(&ours), "IPv4's default metric is 0; host bits do not count");
        assert!(!eth0.holds(&ours) && !eth0.same_path(&ours));
        assert!(!RouteEntry { priority: Some(50), ..ours.clone() }.same_key(&eth0));
        assert!(!RouteEntry { table: 100, ..ours.clone() }.same_key(&eth0));
        let v6 = RouteEntry { priority: Some(1024), ..route("fd00:78::/64", None) };
        assert!(v6.holds(&route("fd00:78::/64", None)), "IPv6's default metric is 1024; it has no scope");
        // A connected route without an MTU is not the one asked for with an MTU; one with it, whatever else.
        let kernel = RouteEntry { scope: Some(253), ..route("10.77.0.0/24", None) };
        assert!(kernel.holds(&route("10.77.0.0/24", None)));
        assert!(!kernel.holds(&RouteEntry { mtu: Some(1400), ..route("10.77.0.0/24", None) }));
        assert!(!kernel.holds(&RouteEntry { scope: Some(254), ..route("10.77.0.0/24", None) }));
    }
}
