// bitforge's simulated board: a Verilated UART device served on a pseudo-terminal.
//
// The device (any top with clk, rst, uart_rx, uart_tx, busy and a CLKS_PER_BIT parameter) is built by Verilator
// with this file as its main (runtime/sim_board.py does the build, with -DSIM_CLKS_PER_BIT equal to the
// parameter and --prefix Vtop). The harness opens a pseudo-terminal pair, prints the slave's path as the first
// line of stdout and then serves it: every byte the host writes to the slave is shifted into uart_rx as an 8N1
// frame (LSB first, CLKS_PER_BIT clocks a bit, frames back to back), and every frame the device sends on
// uart_tx is decoded (mid-bit sampling, stop bit checked) and written to the master, where the host reads it.
// A host program therefore talks to the simulated device exactly as to a board on a USB serial adapter.
//
// Simulated time advances only while the device has work: bits still to shift in, a frame arriving on uart_tx,
// busy high, or fewer than --idle-tail cycles since the last of these. Otherwise the harness blocks in ppoll()
// on the master and uses no CPU; a pause of the host is not seen by the device as time passing. That is the
// one way the simulated board differs from a real one: a device timer that should fire while the device is
// idle (busy low) never fires.
//
// Fault injection (--flip-rate P --seed S) flips one bit of a byte with probability P, independently for each
// direction, from two mt19937_64 streams whose draws depend only on the byte's index in its direction: the
// same seed and bytes give the same flips on every machine.
//
// The process ends cleanly (statistics written, waveform closed) on SIGTERM, SIGINT or SIGHUP, and when its
// parent dies (PR_SET_PDEATHSIG). Signals are blocked except inside ppoll(), so none is lost between checking
// the stop flag and blocking.
#include "Vtop.h"
#include "verilated.h"
#if VM_TRACE_FST
#include "verilated_fst_c.h"
#endif

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#ifndef SIM_CLKS_PER_BIT
#error "build with -DSIM_CLKS_PER_BIT=<the device's CLKS_PER_BIT>"
#endif

namespace {

constexpr uint64_t kClksPerBit = SIM_CLKS_PER_BIT;
static_assert(kClksPerBit >= 1, "CLKS_PER_BIT must be at least 1");
constexpr uint64_t kResetCycles = 16;
// How often (in cycles) a running simulation looks for new host bytes and drains the device's output: a syscall
// every 1024 cycles costs a few percent of the simulation's speed and delays a host byte by microseconds.
constexpr uint64_t kCheckEvery = 1024;
// Device output the host has not read yet is kept here (the pty itself holds ~4 KiB); beyond this it is dropped
// and counted, as a real UART with nobody reading would lose it.
constexpr size_t kOutLimit = 64u << 20;
constexpr int kMaxErrorLines = 100;

volatile sig_atomic_t g_signal = 0;

void on_signal(int sig) { g_signal = sig; }

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "sim_board: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
}

[[noreturn]] void usage(const char* msg) {
    std::fprintf(stderr,
                 "sim_board: %s\n"
                 "usage: sim_board [--stats FILE] [--flip-rate P --seed S] [--idle-tail CYCLES]\n"
                 "                 [--parent-pid PID] [--trace FILE.fst]\n",
                 msg);
    std::exit(2);
}

double now_seconds() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// One direction's fault injector: a uniform draw for every byte (flipped or not), then a bit index for a flip.
class Flipper {
  public:
    Flipper(double rate, uint64_t seed) : rate_(rate), rng_(seed) {}
    uint8_t apply(uint8_t byte) {
        if (rate_ <= 0.0) return byte;
        // The engine's output is fixed by the C++ standard; the standard distributions are not, so the draws
        // are made by hand to be the same with every standard library.
        const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
        if (u >= rate_) return byte;
        ++flipped;
        return byte ^ static_cast<uint8_t>(1u << (rng_() >> 61));
    }
    uint64_t flipped = 0;

  private:
    double rate_;
    std::mt19937_64 rng_;
};

struct Options {
    std::string stats_path;
    std::string trace_path;
    double flip_rate = 0.0;
    uint64_t seed = 0;
    uint64_t idle_tail = 0;
    long parent_pid = 0;
};

uint64_t parse_u64(const char* s, const char* name) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (errno || !*s || *end || *s == '-') usage((std::string(name) + " needs a non-negative integer").c_str());
    return v;
}

Options parse(int argc, char** argv) {
    Options o;
    o.idle_tail = 256 > 20 * kClksPerBit ? 256 : 20 * kClksPerBit;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") usage("a Verilated UART device on a pseudo-terminal");
        if (i + 1 >= argc) usage((a + " needs a value").c_str());
        const char* v = argv[++i];
        if (a == "--stats") {
            o.stats_path = v;
        } else if (a == "--trace") {
            o.trace_path = v;
        } else if (a == "--flip-rate") {
            char* end = nullptr;
            o.flip_rate = std::strtod(v, &end);
            if (!*v || *end || !(o.flip_rate >= 0.0 && o.flip_rate <= 1.0)) usage("--flip-rate needs 0 <= P <= 1");
        } else if (a == "--seed") {
            o.seed = parse_u64(v, "--seed");
        } else if (a == "--idle-tail") {
            o.idle_tail = parse_u64(v, "--idle-tail");
        } else if (a == "--parent-pid") {
            o.parent_pid = static_cast<long>(parse_u64(v, "--parent-pid"));
        } else {
            usage(("unknown option " + a).c_str());
        }
    }
#if !VM_TRACE_FST
    if (!o.trace_path.empty()) usage("--trace needs a board built with trace=True (verilator --trace-fst)");
#endif
    return o;
}

// The pseudo-terminal: the harness reads and writes the master; the host opens the slave. The harness keeps a
// descriptor of the slave open itself, so that the master never sees a hang-up between two host sessions (the
// board stays up while the host closes and reopens the port, like a real one) and the raw settings persist.
struct Pty {
    int master = -1;
    int slave = -1;
    std::string path;
};

Pty open_pty() {
    Pty p;
    p.master = posix_openpt(O_RDWR | O_NOCTTY);
    if (p.master < 0) die("posix_openpt");
    if (grantpt(p.master) || unlockpt(p.master)) die("grantpt/unlockpt");
    const char* name = ptsname(p.master);
    if (!name) die("ptsname");
    p.path = name;
    p.slave = open(name, O_RDWR | O_NOCTTY);
    if (p.slave < 0) die("open the pty slave");
    termios t;
    if (tcgetattr(p.slave, &t)) die("tcgetattr");
    cfmakeraw(&t);  // no echo, no CR/LF translation, no XON/XOFF, 8 bits: every byte value passes untouched
    if (tcsetattr(p.slave, TCSANOW, &t)) die("tcsetattr");
    if (fcntl(p.master, F_SETFL, fcntl(p.master, F_GETFL) | O_NONBLOCK)) die("fcntl O_NONBLOCK");
    return p;
}

// Host -> device: one 8N1 frame at a time on uart_rx, the next one starting as the previous stop bit ends.
class Shifter {
  public:
    bool active() const { return bit_ >= 0; }
    // The level of uart_rx for the coming clock edge; starts the next queued byte when the line is free.
    uint8_t level(std::deque<uint8_t>& queue, Flipper& flips) {
        if (bit_ < 0 && !queue.empty()) {
            frame_ = static_cast<uint16_t>(0x200u | (flips.apply(queue.front()) << 1));
            queue.pop_front();
            bit_ = 0;
            count_ = 0;
        }
        return bit_ < 0 ? 1 : (frame_ >> bit_) & 1;
    }
    // After the edge; true when a frame's stop bit has just ended.
    bool advance() {
        if (bit_ < 0 || ++count_ < kClksPerBit) return false;
        count_ = 0;
        if (++bit_ < 10) return false;
        bit_ = -1;
        return true;
    }

  private:
    int bit_ = -1;  // -1: line idle; 0: start bit; 1-8: data bits; 9: stop bit
    uint64_t count_ = 0;
    uint16_t frame_ = 0;
};

// Device -> host: waits for a falling edge, samples each bit in its middle, checks the stop bit.
class Decoder {
  public:
    enum class Event { none, byte, framing_error, false_start };
    bool active() const { return state_ != State::idle; }
    uint8_t byte() const { return byte_; }

    Event sample(uint8_t line) {
        switch (state_) {
            case State::idle:
                if (line) return Event::none;
                state_ = State::frame;
                count_ = 0;
                next_ = kClksPerBit / 2;
                bit_ = 0;
                byte_ = 0;
                [[fallthrough]];
            case State::frame: {
                if (count_++ != next_) return Event::none;
                next_ += kClksPerBit;
                const int bit = bit_++;
                if (bit == 0) {
                    if (line) {  // low for less than half a bit: a glitch, not a start bit
                        state_ = State::idle;
                        return Event::false_start;
                    }
                } else if (bit <= 8) {
                    byte_ |= static_cast<uint8_t>(line << (bit - 1));
                } else {
                    // A low stop bit is a framing error; the line must go high again before the next start bit
                    // counts, or a stuck-low line would read as an endless run of 0x00 bytes.
                    state_ = line ? State::idle : State::wait_high;
                    return line ? Event::byte : Event::framing_error;
                }
                return Event::none;
            }
            case State::wait_high:
                if (line) state_ = State::idle;
                return Event::none;
        }
        return Event::none;
    }

  private:
    enum class State { idle, frame, wait_high };
    State state_ = State::idle;
    uint64_t count_ = 0, next_ = 0;
    int bit_ = 0;
    uint8_t byte_ = 0;
};

struct Stats {
    uint64_t cycles = 0;
    uint64_t bytes_to_device = 0;
    uint64_t bytes_from_device = 0;
    uint64_t framing_errors = 0;
    uint64_t false_starts = 0;
    uint64_t dropped_from_device = 0;
    uint64_t sleeps = 0;     // times the simulation stopped to wait for the host
    double run_seconds = 0;  // wall time spent simulating (not blocked waiting for the host)
};

class Board {
  public:
    Board(const Options& opt, Pty pty)
        : opt_(opt), pty_(std::move(pty)), flip_in_(opt.flip_rate, opt.seed),
          flip_out_(opt.flip_rate, opt.seed ^ 0x9E3779B97F4A7C15ull) {
        ctx_.reset(new VerilatedContext);
#if VM_TRACE_FST
        if (!opt.trace_path.empty()) ctx_->traceEverOn(true);
#endif
        top_.reset(new Vtop{ctx_.get()});
#if VM_TRACE_FST
        if (!opt.trace_path.empty()) {
            trace_.reset(new VerilatedFstC);
            top_->trace(trace_.get(), 99);
            trace_->open(opt.trace_path.c_str());
        }
#endif
        top_->clk = 0;
        top_->rst = 1;
        top_->uart_rx = 1;
        top_->eval();
    }

    // Runs until a signal (or the parent's death) asks it to stop.
    void serve(const sigset_t& unblocked) {
        uint64_t idle = 0;
        double started = 0;
        bool running = false;
        while (!g_signal) {
            const bool work = stats_.cycles < kResetCycles || shifter_.active() || !to_device_.empty() ||
                              decoder_.active() || top_->busy || !top_->uart_tx;
            idle = work ? 0 : idle + 1;
            if (idle > opt_.idle_tail) {
                if (running) {
                    stats_.run_seconds += now_seconds() - started;
                    ++stats_.sleeps;
                }
                running = false;
                // Only new host bytes (or a signal) end the wait; room for output alone just drains it.
                wait_for_host(unblocked, -1);
                continue;
            }
            if (!running) started = now_seconds();
            running = true;
            if (step()) exchange(unblocked);  // the shifter ran dry: look for more host bytes at once
            if (stats_.cycles % kCheckEvery == 0) exchange(unblocked);
        }
        if (running) stats_.run_seconds += now_seconds() - started;
        flush_out();
    }

    void finish() {
        top_->final();
#if VM_TRACE_FST
        if (trace_) trace_->close();
#endif
    }

    const Stats& stats() const { return stats_; }
    uint64_t flipped_to_device() const { return flip_in_.flipped; }
    uint64_t flipped_from_device() const { return flip_out_.flipped; }
    uint64_t pending_to_device() const { return to_device_.size() + (shifter_.active() ? 1 : 0); }
    uint64_t pending_from_device() const { return out_.size(); }

  private:
    // One clock cycle; true when a host byte has been shifted in completely and no other is queued.
    bool step() {
        const bool in_reset = stats_.cycles < kResetCycles;
        top_->rst = in_reset;
        top_->uart_rx = in_reset ? 1 : shifter_.level(to_device_, flip_in_);
        top_->clk = 1;
        top_->eval();
        dump(2 * stats_.cycles + 1);
        top_->clk = 0;
        top_->eval();
        dump(2 * stats_.cycles + 2);
        ++stats_.cycles;
        switch (decoder_.sample(top_->uart_tx)) {
            case Decoder::Event::byte:
                ++stats_.bytes_from_device;
                if (out_.size() < kOutLimit) {
                    out_.push_back(flip_out_.apply(decoder_.byte()));
                } else {
                    ++stats_.dropped_from_device;
                }
                break;
            case Decoder::Event::framing_error:
                if (++stats_.framing_errors <= kMaxErrorLines)
                    std::fprintf(stderr, "sim_board: framing error at cycle %" PRIu64 ": uart_tx low in the stop "
                                 "bit of byte 0x%02x (not forwarded)\n", stats_.cycles, decoder_.byte());
                break;
            case Decoder::Event::false_start:
                ++stats_.false_starts;
                break;
            case Decoder::Event::none:
                break;
        }
        if (!in_reset && shifter_.advance()) {
            ++stats_.bytes_to_device;
            return to_device_.empty();
        }
        return false;
    }

    void dump(uint64_t t) {
#if VM_TRACE_FST
        if (trace_) trace_->dump(t);
#else
        (void)t;
#endif
    }

    // Waits up to timeout_ms (-1: for ever) for host bytes or room for device bytes, then moves what it can.
    // Signals are delivered only here (ppoll's mask), which is also where a running simulation notices them.
    void wait_for_host(const sigset_t& unblocked, int timeout_ms) {
        pollfd fd{pty_.master, static_cast<short>(POLLIN | (out_.empty() ? 0 : POLLOUT)), 0};
        timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
        const int n = ppoll(&fd, 1, timeout_ms < 0 ? nullptr : &ts, &unblocked);
        if (n < 0) {
            if (errno == EINTR) return;
            die("ppoll");
        }
        if (fd.revents & (POLLERR | POLLNVAL)) {
            errno = EIO;
            die("the pty master failed");
        }
        if (fd.revents & POLLIN) read_host();
        flush_out();
    }

    void exchange(const sigset_t& unblocked) { wait_for_host(unblocked, 0); }

    void read_host() {
        uint8_t buf[65536];
        for (;;) {
            const ssize_t n = read(pty_.master, buf, sizeof buf);
            if (n > 0) {
                to_device_.insert(to_device_.end(), buf, buf + n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EIO) die("read the pty master");
            return;
        }
    }

    void flush_out() {
        while (!out_.empty()) {
            // The deque's first contiguous run; write() takes as much as the pty has room for.
            std::vector<uint8_t> chunk(out_.begin(), out_.begin() + std::min<size_t>(out_.size(), 4096));
            const ssize_t n = write(pty_.master, chunk.data(), chunk.size());
            if (n > 0) {
                out_.erase(out_.begin(), out_.begin() + n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) die("write the pty master");
            return;
        }
    }

    Options opt_;
    Pty pty_;
    std::unique_ptr<VerilatedContext> ctx_;
    std::unique_ptr<Vtop> top_;
#if VM_TRACE_FST
    std::unique_ptr<VerilatedFstC> trace_;
#endif
    Flipper flip_in_, flip_out_;
    Shifter shifter_;
    Decoder decoder_;
    std::deque<uint8_t> to_device_, out_;
    Stats stats_;
};

void write_stats(const Options& opt, const Board& b, double wall) {
    const Stats& s = b.stats();
    char json[1024];
    const int n = std::snprintf(
        json, sizeof json,
        "{\"clks_per_bit\": %" PRIu64 ", \"cycles\": %" PRIu64 ", \"bytes_to_device\": %" PRIu64
        ", \"bytes_from_device\": %" PRIu64 ", \"framing_errors\": %" PRIu64 ", \"false_starts\": %" PRIu64
        ", \"flipped_to_device\": %" PRIu64 ", \"flipped_from_device\": %" PRIu64
        ", \"dropped_from_device\": %" PRIu64 ", \"pending_to_device\": %" PRIu64
        ", \"pending_from_device\": %" PRIu64 ", \"sleeps\": %" PRIu64
        ", \"run_seconds\": %.6f, \"wall_seconds\": %.6f}\n",
        kClksPerBit, s.cycles, s.bytes_to_device, s.bytes_from_device, s.framing_errors, s.false_starts,
        b.flipped_to_device(), b.flipped_from_device(), s.dropped_from_device, b.pending_to_device(),
        b.pending_from_device(), s.sleeps, s.run_seconds, wall);
    std::fprintf(stderr, "sim_board: stats %s", json);
    if (opt.stats_path.empty()) return;
    // Written beside and renamed: a reader sees the whole file or none.
    const std::string tmp = opt.stats_path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f || std::fwrite(json, 1, n, f) != static_cast<size_t>(n) || std::fclose(f) ||
        std::rename(tmp.c_str(), opt.stats_path.c_str()))
        die(("write " + opt.stats_path).c_str());
}

}  // namespace

int main(int argc, char** argv) {
    const Options opt = parse(argc, argv);
    const double t0 = now_seconds();

    // Block the stop signals everywhere but inside ppoll(); the handler only records which one came.
    sigset_t stops, unblocked;
    sigemptyset(&stops);
    for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stops, s);
    if (sigprocmask(SIG_BLOCK, &stops, &unblocked)) die("sigprocmask");
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaction(s, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    for (int s : {SIGTERM, SIGINT, SIGHUP}) sigdelset(&unblocked, s);
    // The parent's death sends SIGTERM; a parent that died before this call would never send it.
    if (prctl(PR_SET_PDEATHSIG, SIGTERM)) die("prctl");
    if (opt.parent_pid && getppid() != opt.parent_pid) g_signal = SIGTERM;

    Pty pty = open_pty();
    std::printf("%s\n", pty.path.c_str());
    std::fflush(stdout);
    // Nothing else goes to stdout: a reader that stopped reading after the path must not block or break us.
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);

    Board board(opt, std::move(pty));
    board.serve(unblocked);
    board.finish();
    if (g_signal) std::fprintf(stderr, "sim_board: stopped by signal %d\n", static_cast<int>(g_signal));
    write_stats(opt, board, now_seconds() - t0);
    return 0;
}
