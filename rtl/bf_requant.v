// bf_requant: one fixed-point code -> a code of another fixed-point type, combinational.
//
// Bit-exact with bitforge.toolchain.fixed.requantize (ap_fixed semantics): the binary point moves from
// IN_FRAC to OUT_FRAC fractional bits, the dropped bits are rounded as OUT_ROUNDING says (judged on the exact
// value), and the rounded value is brought into range as OUT_OVERFLOW says (judged after rounding, so a
// rounding carry can saturate). Either side may be signed or unsigned; the shift may go either way and may
// exceed the input width. Latency 0 (no clock): the caller registers the result where timing needs it.
//
// Codes (stages.ROUNDING_CODE / OVERFLOW_CODE):
//   OUT_ROUNDING 0 TRN, 1 TRN_ZERO, 2 RND, 3 RND_ZERO, 4 RND_INF, 5 RND_MIN_INF, 6 RND_CONV
//   OUT_OVERFLOW 0 WRAP, 1 SAT, 2 SAT_SYM, 3 SAT_ZERO
//
// How: the input is viewed as signed (one zero bit on top when unsigned) and sign-extended by at least one
// bit, so that every shift below is a plain part select and no replication count is ever zero. Rounding
// adds one LSB to the floor when the first dropped bit (qb), the OR of the lower dropped bits (r), the sign
// (s) and the floor's LSB say so; this is ap_fixed_base::quantization_adjust, as fixed._round_up documents.
// Overflow is detected on the top bits only (all equal for signed, all zero for unsigned), which is much
// cheaper than comparing with the range's ends. SAT_SYM saturates low to MIN | 1 (= -MAX), the bit pattern
// ap_fixed writes; for a 1-bit type that is MIN itself, the quirk fixed.FixedType.sat_min_code records.
`default_nettype none
module bf_requant #(
    parameter integer IN_W = 16,
    parameter integer IN_FRAC = 8,
    parameter integer IN_SIGNED = 1,
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 4,
    parameter integer OUT_SIGNED = 1,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0
) (
    input  wire [IN_W-1:0]  in_code,
    output wire [OUT_W-1:0] out_code
);
    localparam integer D = IN_FRAC - OUT_FRAC;            // bits dropped (> 0) or appended (< 0)
    localparam integer S_W = IN_W + (IN_SIGNED != 0 ? 0 : 1);  // width of the signed view of the input
    // Rounded value, signed: one spare bit on top when bits are dropped (the rounding carry), exact otherwise.
    localparam integer R_W = D > 0 ? ((S_W > D + 1 ? S_W : D + 1) + 1 - D) : S_W + 1 - D;
    localparam integer X_W = (R_W > OUT_W ? R_W : OUT_W) + 1;  // R sign-extended past the output width

    wire [S_W-1:0] s;
    generate
        if (IN_SIGNED != 0) begin : g_in_signed
            assign s = in_code;
        end else begin : g_in_unsigned
            assign s = {1'b0, in_code};
        end
    endgenerate

    // ---- align the binary point, rounding what is dropped ---------------------------------------------
    wire [R_W-1:0] rounded;
    generate
        if (D > 0) begin : g_drop
            localparam integer E_W = (S_W > D + 1 ? S_W : D + 1) + 1;
            wire [E_W-1:0] e = {{(E_W - S_W){s[S_W-1]}}, s};
            wire [R_W-1:0] floor_q = e[E_W-1:D];
            wire inc;
            // Not every mode reads every dropped bit (TRN reads none, RND only qb): unused on purpose.
            /* verilator lint_off UNUSEDSIGNAL */
            wire qb = e[D-1];                      // first dropped bit: the 1/2 LSB
            wire neg = e[E_W-1];                   // sign of the exact value
            wire r;                                // any lower dropped bit set
            /* verilator lint_on UNUSEDSIGNAL */
            if (D >= 2) begin : g_r
                assign r = |e[D-2:0];
            end else begin : g_no_r
                assign r = 1'b0;
            end
            if (OUT_ROUNDING == 0) begin : g_trn
                assign inc = 1'b0;
            end else if (OUT_ROUNDING == 1) begin : g_trn_zero
                assign inc = neg && (qb || r);
            end else if (OUT_ROUNDING == 2) begin : g_rnd
                assign inc = qb;
            end else if (OUT_ROUNDING == 3) begin : g_rnd_zero
                assign inc = qb && (r || neg);
            end else if (OUT_ROUNDING == 4) begin : g_rnd_inf
                assign inc = qb && (r || !neg);
            end else if (OUT_ROUNDING == 5) begin : g_rnd_min_inf
                assign inc = qb && r;
            end else begin : g_rnd_conv
                assign inc = qb && (r || floor_q[0]);
            end
            assign rounded = floor_q + {{(R_W - 1){1'b0}}, inc};
        end else begin : g_keep
            // Appending -D zero bits (or none) is exact; one sign copy on top keeps the replication non-zero.
            assign rounded = {{(1 - D){s[S_W-1]}}, s} << (-D);
        end
    endgenerate

    // ---- overflow ----------------------------------------------------------------------------------------
    /* verilator lint_off UNUSEDSIGNAL */
    wire [X_W-1:0] x = {{(X_W - R_W){rounded[R_W-1]}}, rounded};  // WRAP reads only the low OUT_W bits
    /* verilator lint_on UNUSEDSIGNAL */
    wire [OUT_W-1:0] low = x[OUT_W-1:0];
    generate
        if (OUT_OVERFLOW == 0) begin : g_wrap
            assign out_code = low;
        end else begin : g_saturate
            localparam [OUT_W-1:0] ONES = {OUT_W{1'b1}};
            localparam [OUT_W-1:0] MAX = OUT_SIGNED != 0 ? (ONES >> 1) : ONES;
            localparam [OUT_W-1:0] MIN = ~MAX;  // 100..0 when signed, 0 when unsigned
            wire in_range;
            if (OUT_SIGNED != 0) begin : g_signed_range
                wire [X_W-OUT_W:0] top = x[X_W-1:OUT_W-1];
                assign in_range = (&top) || !(|top);
            end else begin : g_unsigned_range
                assign in_range = !(|x[X_W-1:OUT_W]);
            end
            wire over = !x[X_W-1] && !in_range;
            wire under = x[X_W-1] && !in_range;
            if (OUT_OVERFLOW == 3) begin : g_sat_zero
                assign out_code = (over || under) ? {OUT_W{1'b0}} : low;
            end else if (OUT_OVERFLOW == 2 && OUT_SIGNED != 0) begin : g_sat_sym
                localparam [OUT_W-1:0] SYM_MIN = MIN | (ONES ^ (ONES << 1));  // MIN | 1
                wire at_min = in_range && (low == MIN);
                assign out_code = over ? MAX : (under || at_min) ? SYM_MIN : low;
            end else begin : g_sat  // SAT, and SAT_SYM of an unsigned type (no symmetric case)
                assign out_code = over ? MAX : under ? MIN : low;
            end
        end
    endgenerate
endmodule
`default_nettype wire
