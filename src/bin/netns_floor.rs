//! The kernel floor of an attach/detach: move one netdev into a namespace and back with raw netlink,
//! nothing else. `netns-floor DEV NETNS_PATH [N]` prints the median of N round trips in ms.

#[path = "../bench_util.rs"]
mod bench_util;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: netns-floor DEV NETNS_PATH [N]");
        std::process::exit(2);
    }
    let n: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20);
    let mut floor = match bench_util::Floor::new(&args[1], &args[2]) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("netns-floor: {e}");
            std::process::exit(1);
        }
    };
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        match floor.cycle(false) {
            Ok(d) => times.push(d),
            Err(e) => {
                eprintln!("netns-floor: {e}");
                std::process::exit(1);
            }
        }
    }
    println!("{:.2}", bench_util::median(&mut times));
}
