//! The kernel floor of an attach/detach: move one netdev into a namespace and back with raw netlink,
//! nothing else. `netns-floor DEV NETNS_PATH [N]` prints the median of N round trips in ms.
//! `netns-floor DEV NETNS_PATH DEV2 NETNS_PATH2 ... [N]` (several pairs) is the parallel floor: one thread
//! per device, released together, each moving its own device into its own namespace and back; it prints
//! the median wall time of N such batches in ms.

mod bench_util;

const USAGE: &str = "usage: netns-floor DEV NETNS_PATH [DEV NETNS_PATH]... [N]";

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut n = 20usize;
    if args.len() % 2 == 1 {
        let last = args.pop().unwrap_or_default();
        n = match last.parse() {
            Ok(v) if v > 0 => v,
            _ => {
                eprintln!("netns-floor: N must be a positive number, not {last:?}\n{USAGE}");
                std::process::exit(2);
            }
        };
    }
    if args.is_empty() {
        eprintln!("{USAGE}");
        std::process::exit(2);
    }
    let floors: Result<Vec<_>, String> = args
        .chunks(2)
        .map(|p| bench_util::Floor::new(&p[0], &p[1]).map_err(|e| format!("{} in {}: {e}", p[0], p[1])))
        .collect();
    let mut floors = floors.unwrap_or_else(|e| {
        eprintln!("netns-floor: {e}");
        std::process::exit(1);
    });
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let r = match floors.as_mut_slice() {
            [one] => one.cycle(false),
            many => bench_util::parallel_cycle(many, false).map(|s| s.ms),
        };
        match r {
            Ok(d) => times.push(d),
            Err(e) => {
                eprintln!("netns-floor: {e}");
                std::process::exit(1);
            }
        }
    }
    println!("{:.2}", bench_util::median(&mut times));
}
