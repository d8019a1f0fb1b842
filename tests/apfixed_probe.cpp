// Reference oracle for bitforge.toolchain.fixed: converts values with the ap_fixed headers that hls4ml
// ships (templates/vivado/ap_types) and prints the raw bits, so tests/test_fixed_apfixed.py can compare
// them with fixed.quantize / fixed.requantize bit for bit.
//
// Template parameters are compile-time, so the type combinations live in the CASES table below
// (X-macros: every rounding mode x every overflow mode x signed/unsigned x a few (W, I) shapes).
// Each destination type also gets SOURCES ap_fixed source types for the fixed -> fixed path.
//
// Protocol (stdin -> stdout, one answer line per request line):
//   L                    -> one line per case: "idx W I S Q O W2 I2 S2 W2 I2 S2 ..." then "END"
//   D idx hexfloat       -> hex of the W raw bits of ap_fixed<W,I,Q,O>(double)
//   R idx k hexbits      -> hex of the W raw bits of ap_fixed<W,I,Q,O>(src_k) where src_k's raw bits are hexbits
#include <ap_fixed.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

template <int W, int I, bool S, ap_q_mode Q, ap_o_mode O>
using fx = typename std::conditional<S, ap_fixed<W, I, Q, O>, ap_ufixed<W, I, Q, O> >::type;

template <int W, class T>
static std::string hex_bits(const T& x) {
  std::string s;
  for (int d = (W + 3) / 4 - 1; d >= 0; --d) {
    int v = 0;
    for (int b = 3; b >= 0; --b) {
      int i = 4 * d + b;
      if (i < W && x[i]) v |= 1 << b;
    }
    s += "0123456789abcdef"[v];
  }
  return s;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  fprintf(stderr, "apfixed_probe: bad hex digit '%c'\n", c);
  exit(2);
}

template <int W, class T>
static void set_hex(T& x, const char* h) {
  const int n = (int)strlen(h);
  for (int i = 0; i < W; ++i) {
    const int d = i / 4;
    const int v = d < n ? hex_digit(h[n - 1 - d]) : 0;
    x[i] = ((v >> (i % 4)) & 1) != 0;
  }
}

template <int W, int I, bool S, ap_q_mode Q, ap_o_mode O>
static std::string from_double(double d) {
  fx<W, I, S, Q, O> y(d);
  return hex_bits<W>(y);
}

template <int W, int I, bool S, ap_q_mode Q, ap_o_mode O, int W2, int I2, bool S2>
static std::string from_source(const char* h) {
  fx<W2, I2, S2, AP_TRN, AP_WRAP> x;
  set_hex<W2>(x, h);
  fx<W, I, S, Q, O> y(x);
  return hex_bits<W>(y);
}

// Source types for the fixed -> fixed path, as (W2, I2, S2) functions of the destination (W, I, S):
//   0: 7 more fraction bits, 3 more integer bits, signed    (rounding, then overflow; ties at bit 6)
//   1: the same, unsigned                                    (unsigned -> signed / unsigned)
//   2: 7 fewer fraction bits, 9 more integer bits, opposite signedness (left shift; wraps and saturates)
//   3: 4 bits whose LSB is 2**-6 destination LSBs, signed    (the shift exceeds the source width)
#define NSOURCES 4

struct Case {
  int w, i, s;
  const char* q;
  const char* o;
  std::string (*from_double)(double);
  std::string (*from_source[NSOURCES])(const char*);
  int src[NSOURCES][3];
};

#define CASE(W, I, S, Q, O) \
  {W, I, S, #Q, #O, &from_double<W, I, S, Q, O>, {SOURCES_Q(W, I, S, Q, O)}, {SRCDIMS(W, I, S)}},
#define SOURCES_Q(W, I, S, Q, O)                                                              \
  &from_source<W, I, S, Q, O, (W) + 10, (I) + 3, true>,                                       \
      &from_source<W, I, S, Q, O, (W) + 10, (I) + 3, false>,                                  \
      &from_source<W, I, S, Q, O, (W) + 2, (I) + 9, !(S)>, &from_source<W, I, S, Q, O, 4, (I) - (W) - 2, true>
#define SRCDIMS(W, I, S) \
  {(W) + 10, (I) + 3, 1}, {(W) + 10, (I) + 3, 0}, {(W) + 2, (I) + 9, !(S)}, {4, (I) - (W) - 2, 1}

#define ALL_Q(W, I, S, O)                                                                          \
  CASE(W, I, S, AP_TRN, O) CASE(W, I, S, AP_TRN_ZERO, O) CASE(W, I, S, AP_RND, O)                  \
  CASE(W, I, S, AP_RND_ZERO, O) CASE(W, I, S, AP_RND_INF, O) CASE(W, I, S, AP_RND_MIN_INF, O)      \
  CASE(W, I, S, AP_RND_CONV, O)
#define ALL_QO(W, I, S) \
  ALL_Q(W, I, S, AP_WRAP) ALL_Q(W, I, S, AP_SAT) ALL_Q(W, I, S, AP_SAT_SYM) ALL_Q(W, I, S, AP_SAT_ZERO)
#define FULL_SHAPE(W, I) ALL_QO(W, I, true) ALL_QO(W, I, false)

// Lighter cover for shapes whose interest is the shape itself: every rounding mode with SAT, and the
// other overflow modes with three rounding modes (truncating, tie-to-even, tie-toward-zero).
#define SOME_QO(W, I, S)                                                                            \
  ALL_Q(W, I, S, AP_SAT) CASE(W, I, S, AP_TRN, AP_WRAP) CASE(W, I, S, AP_RND_CONV, AP_WRAP)        \
  CASE(W, I, S, AP_RND_ZERO, AP_WRAP) CASE(W, I, S, AP_TRN, AP_SAT_SYM)                            \
  CASE(W, I, S, AP_RND_CONV, AP_SAT_SYM) CASE(W, I, S, AP_RND_ZERO, AP_SAT_SYM)                    \
  CASE(W, I, S, AP_TRN, AP_SAT_ZERO) CASE(W, I, S, AP_RND_CONV, AP_SAT_ZERO)                       \
  CASE(W, I, S, AP_RND_ZERO, AP_SAT_ZERO)
#define SOME_SHAPE(W, I) SOME_QO(W, I, true) SOME_QO(W, I, false)

// Compile time grows with the number of instantiations (about 0.15 s each at -O1 on one core), so the
// full cross product is kept to four shapes: ordinary, I < 0, I > W and a width beyond 64 bits (the
// big-int path); I == W, one bit, bitforge's int64 edge (63 bits) and a wide I < 0 get the lighter cover.
// The table is split in two halves (PROBE_PART=1, 2) compiled in parallel and linked with the main
// part (no PROBE_PART).
#if PROBE_PART == 1
extern const Case CASES_1[] = {FULL_SHAPE(8, 3) FULL_SHAPE(6, -2) SOME_SHAPE(7, 7) SOME_SHAPE(1, 1)};
extern const int NCASES_1 = sizeof(CASES_1) / sizeof(CASES_1[0]);
#elif PROBE_PART == 2
extern const Case CASES_2[] = {FULL_SHAPE(5, 8) FULL_SHAPE(70, 24) SOME_SHAPE(63, 20) SOME_SHAPE(80, -5)};
extern const int NCASES_2 = sizeof(CASES_2) / sizeof(CASES_2[0]);
#else
extern const Case CASES_1[];
extern const int NCASES_1;
extern const Case CASES_2[];
extern const int NCASES_2;

static const Case& case_at(int idx) { return idx < NCASES_1 ? CASES_1[idx] : CASES_2[idx - NCASES_1]; }

static const Case& get_case(const char* tok) {
  const int idx = tok ? atoi(tok) : -1;
  if (idx < 0 || idx >= NCASES_1 + NCASES_2) {
    fprintf(stderr, "apfixed_probe: case index %s out of range [0, %d)\n", tok ? tok : "(none)",
            NCASES_1 + NCASES_2);
    exit(2);
  }
  return case_at(idx);
}

int main() {
  static char line[4096];
  std::string out;
  while (fgets(line, sizeof line, stdin)) {
    char* cmd = strtok(line, " \t\r\n");
    if (!cmd) continue;
    if (cmd[0] == 'L') {
      for (int k = 0; k < NCASES_1 + NCASES_2; ++k) {
        const Case& c = case_at(k);
        char buf[256];
        int n = snprintf(buf, sizeof buf, "%d %d %d %d %s %s", k, c.w, c.i, c.s, c.q, c.o);
        for (int j = 0; j < NSOURCES; ++j)
          n += snprintf(buf + n, sizeof buf - n, " %d %d %d", c.src[j][0], c.src[j][1], c.src[j][2]);
        out += buf;
        out += '\n';
      }
      out += "END\n";
    } else if (cmd[0] == 'D') {
      const Case& c = get_case(strtok(NULL, " \t\r\n"));
      const char* v = strtok(NULL, " \t\r\n");
      out += c.from_double(strtod(v, NULL));
      out += '\n';
    } else if (cmd[0] == 'R') {
      const Case& c = get_case(strtok(NULL, " \t\r\n"));
      const int k = atoi(strtok(NULL, " \t\r\n"));
      if (k < 0 || k >= NSOURCES) {
        fprintf(stderr, "apfixed_probe: source index %d out of range\n", k);
        return 2;
      }
      out += c.from_source[k](strtok(NULL, " \t\r\n"));
      out += '\n';
    } else {
      fprintf(stderr, "apfixed_probe: unknown request '%s'\n", cmd);
      return 2;
    }
    if (out.size() > (1 << 16)) {
      fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
#endif  // PROBE_PART
