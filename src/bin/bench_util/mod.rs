//! Shared by the benchmark binaries: the raw-netlink floor cycle (one device, or several at once), CPU time
//! from rusage, and statistics.
#![allow(dead_code)]

use sriov_rdma_cni::kernel::link::RouteSocket;
use sriov_rdma_cni::kernel::netlink::Route;
use sriov_rdma_cni::kernel::netns::Netns;
use std::sync::Barrier;
use std::time::Instant;

/// CPU time and peak RSS of a process or thread, from its rusage.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    pub user_ms: f64,
    pub sys_ms: f64,
    /// Peak resident set in KiB (0 for a thread).
    pub maxrss: i64,
}

impl Cpu {
    pub fn from_rusage(ru: &libc::rusage) -> Cpu {
        let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
        Cpu { user_ms: ms(ru.ru_utime), sys_ms: ms(ru.ru_stime), maxrss: ru.ru_maxrss }
    }

    /// The calling thread's CPU time so far (`RUSAGE_THREAD`).
    pub fn this_thread() -> std::io::Result<Cpu> {
        // SAFETY: an all-zero rusage is a valid value to be filled in.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: fills in the local.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut c = Cpu::from_rusage(&ru);
        c.maxrss = 0;
        Ok(c)
    }

    /// Sums the times, keeps the larger peak RSS.
    pub fn add(self, o: Cpu) -> Cpu {
        Cpu { user_ms: self.user_ms + o.user_ms, sys_ms: self.sys_ms + o.sys_ms, maxrss: self.maxrss.max(o.maxrss) }
    }

    pub fn total_ms(&self) -> f64 {
        self.user_ms + self.sys_ms
    }
}

/// One measured cycle: its wall time, the rusage the kernel reports for it, its exact CPU time, and the
/// samples that split that CPU time into user and system time.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub ms: f64,
    /// As the kernel reports it (wait4 for a process, `RUSAGE_THREAD` for a floor thread): the split
    /// between user and system time is tick-sampled; the sum is exact for a process.
    pub ru: Cpu,
    /// Exact CPU time: ru_utime + ru_stime of a reaped process, `CLOCK_THREAD_CPUTIME_ID` for a thread.
    pub cpu_ms: f64,
    pub split: Split,
}

impl Sample {
    pub fn add(self, o: Sample) -> Sample {
        Sample {
            ms: self.ms + o.ms,
            ru: self.ru.add(o.ru),
            cpu_ms: self.cpu_ms + o.cpu_ms,
            split: self.split.add(o.split),
        }
    }
}

/// Moves `dev` into a namespace and back, with one socket on each side, like the plugin does.
pub struct Floor {
    dev: String,
    host: Netns,
    pod: Netns,
    host_sock: RouteSocket,
    pod_sock: RouteSocket,
}

impl Floor {
    pub fn new(dev: &str, netns: &str) -> std::io::Result<Floor> {
        let host = Netns::current()?;
        let pod = Netns::open(netns)?;
        let pod_sock = pod.socket::<Route>()?;
        Ok(Floor { dev: dev.to_string(), host, pod, host_sock: RouteSocket::new()?, pod_sock })
    }

    /// One round trip in milliseconds; with `up`, the device is also brought up in the namespace (the
    /// driver's open, which every attach needs: on some drivers it dominates).
    pub fn cycle(&mut self, up: bool) -> std::io::Result<f64> {
        let t = Instant::now();
        let what = |e: std::io::Error, step: &str| std::io::Error::new(e.kind(), format!("{} {step}: {e}", self.dev));
        let l = self
            .host_sock
            .link_by_name(&self.dev)
            .map_err(|e| what(e, "lookup in the host"))?
            .ok_or_else(|| std::io::Error::other(format!("{} not found in the host", self.dev)))?;
        self.host_sock.move_link(l.index, self.pod.fd(), &self.dev).map_err(|e| what(e, "move into the netns"))?;
        let l = self
            .pod_sock
            .link_by_name(&self.dev)
            .map_err(|e| what(e, "lookup in the netns"))?
            .ok_or_else(|| std::io::Error::other(format!("{} not found in the netns", self.dev)))?;
        if up {
            self.pod_sock.set_link(l.index, vec![], Some(true)).map_err(|e| what(e, "link up in the netns"))?;
        }
        self.pod_sock.move_link(l.index, self.host.fd(), &self.dev).map_err(|e| what(e, "move back"))?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }

    /// One round trip on a thread of its own, measured the way a plugin process is: its rusage, its exact
    /// CPU time, and (with `sample`, a period in ns of CPU time) samples of where that time went.
    pub fn cycle_on_thread(&mut self, up: bool, sample: Option<u64>) -> std::io::Result<Sample> {
        std::thread::scope(|s| {
            s.spawn(|| self.measured_cycle(up, sample, None))
                .join()
                .map_err(|_| std::io::Error::other("floor thread panicked"))?
                .map(|(_, s)| s)
        })
    }

    /// A cycle measured on the calling thread (which must be a fresh one, or its rusage means little); waits
    /// at `go` first when given. Returns the instant it ended and the sample.
    fn measured_cycle(
        &mut self,
        up: bool,
        sample: Option<u64>,
        go: Option<&Barrier>,
    ) -> std::io::Result<(Instant, Sample)> {
        let sampler = sample.map(Sampler::start).transpose();
        // Reached whatever happened above, so that the other threads of a batch are released.
        if let Some(b) = go {
            b.wait();
        }
        let sampler = sampler?;
        let (c0, r0) = (thread_cpu_ms(), Cpu::this_thread()?);
        let ms = self.cycle(up)?;
        let end = Instant::now();
        let (c1, r1) = (thread_cpu_ms(), Cpu::this_thread()?);
        let ru = Cpu { user_ms: r1.user_ms - r0.user_ms, sys_ms: r1.sys_ms - r0.sys_ms, maxrss: 0 };
        let split = sampler.map(|s| s.finish(None)).unwrap_or_default();
        Ok((end, Sample { ms, ru, cpu_ms: c1 - c0, split }))
    }
}

/// The parallel floor: one thread per `Floor`, released together, each moving its own device into its
/// namespace and back. Returns the batch's wall time (release to the last thread's end) and the threads'
/// summed CPU time.
pub fn parallel_cycle(floors: &mut [Floor], up: bool) -> std::io::Result<Sample> {
    let go = Barrier::new(floors.len() + 1);
    std::thread::scope(|s| {
        let threads: Vec<_> = floors
            .iter_mut()
            .map(|f| {
                let go = &go;
                s.spawn(move || f.measured_cycle(up, None, Some(go)))
            })
            .collect();
        go.wait();
        let start = Instant::now();
        let mut last = start;
        let mut sum = Sample::default();
        let mut first_err = None;
        for t in threads {
            match t.join().map_err(|_| std::io::Error::other("floor thread panicked"))? {
                Ok((end, smp)) => {
                    last = last.max(end);
                    sum = sum.add(smp);
                }
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(Sample { ms: last.duration_since(start).as_secs_f64() * 1e3, ..sum }),
        }
    })
}

/// Samples of where a thread and everything it starts spend their CPU time: a task-clock event every
/// period of their running time, per online CPU, inherited across fork and exec (as `perf record` does
/// for a command), read from the ring buffers when the work is done. The mode of each sample (user or
/// kernel) splits an exactly known CPU total into user and system time far more finely than rusage can on
/// a kernel with tick-based accounting (250 Hz here: a process that was never hit by a tick in kernel mode
/// reports all of its time as user time).
pub struct Sampler {
    rings: Vec<Ring>,
}

/// The default period: 250 µs of task time between samples, ~25 samples for a plugin cycle that runs 6.5 ms.
/// Each sample is a timer interrupt, in a VM a costly exit: at 100 µs the sampled processes ran 15-30 % longer
/// here, at 250 µs about 10 %, which is why cni-bench samples in a pass of its own that it does not time.
pub const PERIOD_NS: u64 = 250_000;
const RING_PAGES: usize = 8;

struct Ring {
    fd: std::os::fd::OwnedFd,
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping belongs to this value alone; it is only read after the sampled work is done.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping made in `Sampler::start`, unmapped once.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// The first 64 bytes of `struct perf_event_attr` (PERF_ATTR_SIZE_VER0): all a task-clock sampler needs.
#[repr(C)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const ATTR_INHERIT: u64 = 1 << 1;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_THROTTLE: u32 = 5;
const PERF_RECORD_SAMPLE: u32 = 9;
const PERF_RECORD_MISC_CPUMODE_MASK: u16 = 7;
const PERF_RECORD_MISC_KERNEL: u16 = 1;
const PERF_RECORD_MISC_USER: u16 = 2;

/// What a `Sampler` saw: samples in user mode, in kernel mode, and samples the kernel dropped or
/// throttled (non-zero means the split is less certain).
#[derive(Debug, Clone, Copy, Default)]
pub struct Split {
    pub user: u64,
    pub kernel: u64,
    pub lost: u64,
}

impl Split {
    pub fn add(self, o: Split) -> Split {
        Split { user: self.user + o.user, kernel: self.kernel + o.kernel, lost: self.lost + o.lost }
    }

    /// `total_ms` divided between user and system by the samples; `None` without samples.
    pub fn apply(&self, total_ms: f64) -> Option<(f64, f64)> {
        let n = self.user + self.kernel;
        (n > 0).then(|| {
            let u = total_ms * self.user as f64 / n as f64;
            (u, total_ms - u)
        })
    }
}

fn online_cpus() -> std::io::Result<Vec<i32>> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    let bad = || std::io::Error::other(format!("/sys/devices/system/cpu/online: cannot parse {:?}", s.trim()));
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (i32, i32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        if b < a || b - a > 4096 {
            return Err(bad());
        }
        cpus.extend(a..=b);
    }
    Ok(cpus)
}

impl Sampler {
    /// Starts sampling the calling thread and every thread and process it starts from now on, every
    /// `period_ns` of their CPU time.
    pub fn start(period_ns: u64) -> std::io::Result<Sampler> {
        use std::os::fd::FromRawFd;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let attr = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: period_ns,
            sample_type: PERF_SAMPLE_TID,
            read_format: 0,
            flags: ATTR_INHERIT,
            wakeup_events: 0,
            bp_type: 0,
            config1: 0,
        };
        let mut rings = Vec::new();
        // The kernel refuses to map an inherited per-task event that follows the task on every CPU (all
        // children would write one buffer): one event, and one buffer, per CPU.
        for cpu in online_cpus()? {
            // SAFETY: `attr` is a valid perf_event_attr of the size it declares; pid 0 is this thread.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    &attr as *const PerfEventAttr,
                    0,
                    cpu,
                    -1,
                    PERF_FLAG_FD_CLOEXEC,
                )
            };
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                return Err(std::io::Error::new(e.kind(), format!("perf_event_open (task-clock, CPU {cpu}): {e}")));
            }
            // SAFETY: a new descriptor that nothing else owns.
            let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
            let len = page * (1 + RING_PAGES);
            // SAFETY: maps the event's ring buffer; checked for MAP_FAILED below.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                let e = std::io::Error::last_os_error();
                return Err(std::io::Error::new(e.kind(), format!("mapping the perf ring buffer: {e}")));
            }
            rings.push(Ring { fd, base, len });
        }
        Ok(Sampler { rings })
    }

    /// Counts the samples taken so far whose process is not `skip_pid` (the sampling process itself, when
    /// only its children are of interest). Call it once the sampled processes have been reaped.
    pub fn finish(self, skip_pid: Option<u32>) -> Split {
        let mut split = Split::default();
        for r in &self.rings {
            let page = r.len / (1 + RING_PAGES);
            let data_size = (r.len - page) as u64;
            // SAFETY: the control page is mapped; data_head is at offset 1024 of struct perf_event_mmap_page
            // and is only read, with acquire ordering as the kernel documents.
            let head = unsafe {
                let p = (r.base as *const u8).add(1024) as *const std::sync::atomic::AtomicU64;
                (*p).load(std::sync::atomic::Ordering::Acquire)
            };
            // The tail stays 0: the kernel never writes past one buffer's worth (it counts LOST instead).
            let end = head.min(data_size) as usize;
            // SAFETY: bytes [page, page + end) of the mapping hold records the kernel has finished writing.
            let data = unsafe { std::slice::from_raw_parts((r.base as *const u8).add(page), end) };
            let mut off = 0usize;
            while off + 8 <= data.len() {
                let ty = u32::from_ne_bytes([data[off], data[off + 1], data[off + 2], data[off + 3]]);
                let misc = u16::from_ne_bytes([data[off + 4], data[off + 5]]);
                let size = u16::from_ne_bytes([data[off + 6], data[off + 7]]) as usize;
                if size < 8 || off + size > data.len() {
                    break;
                }
                let body = &data[off + 8..off + size];
                match ty {
                    PERF_RECORD_SAMPLE if body.len() >= 8 => {
                        let pid = u32::from_ne_bytes([body[0], body[1], body[2], body[3]]);
                        if Some(pid) != skip_pid {
                            match misc & PERF_RECORD_MISC_CPUMODE_MASK {
                                PERF_RECORD_MISC_USER => split.user += 1,
                                PERF_RECORD_MISC_KERNEL => split.kernel += 1,
                                _ => {}
                            }
                        }
                    }
                    PERF_RECORD_LOST if body.len() >= 16 => {
                        split.lost += u64::from_ne_bytes(body[8..16].try_into().unwrap_or_default());
                    }
                    PERF_RECORD_THROTTLE => split.lost += 1,
                    _ => {}
                }
                off += size;
            }
        }
        split
    }
}

/// The calling thread's CPU time in ms (`CLOCK_THREAD_CPUTIME_ID`: exact, including the running slice).
pub fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: fills in the local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

pub fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}
