// bf_const_mul: p = a * C for a constant C, as shifts and adds in canonical signed digits; combinational.
//
// The product is the exact one of fixed.multiply (A_W + C_W bits, signed when either side is), like
// bf_mul's, but no multiplier is inferred: C is recoded into canonical signed digits (digits -1, 0, +1,
// no two adjacent non-zero, so at most ceil((C_W + 1) / 2) of them and about C_W / 3 on average), and
// p = sum of +-(a << k) over the non-zero digits k: one adder or subtractor per digit after the first.
// A zero constant is a constant zero, a power of two is wiring. Synthesis sees only adders, so a fully
// parallel layer never lands in DSP blocks (of which small FPGAs have a handful) and costs LUTs in
// proportion to its weights' digits, the way distributed-arithmetic generators count it.
//
// Why modular sums are exact: every term and partial sum is kept to the product's P_W bits (two's
// complement, wrapping). The true product fits P_W bits, and addition modulo 2**P_W is exact for any
// result that fits, whatever the partial sums did on the way. C_W is at most 30 (the recoding runs on
// Verilog integers); wider constants use bf_mul. Latency 0.
`default_nettype none
module bf_const_mul #(
    parameter integer A_W = 8,
    parameter integer A_SIGNED = 1,
    parameter integer C_W = 8,
    parameter integer C_SIGNED = 1,
    parameter [C_W-1:0] C = {C_W{1'b0}}
) (
    input  wire [A_W-1:0]     a,
    output wire [A_W+C_W-1:0] p
);
    localparam integer P_W = A_W + C_W;
    localparam integer NDIG = C_W + 1;  // a canonical signed digit form may be one digit longer
    localparam integer CV = value_of(C);
    localparam integer FIRST = first_start(CV);

    // C's value as a Verilog integer (two's complement when C_SIGNED).
    function integer value_of(input [C_W-1:0] c);
        integer i;
        begin
            value_of = 0;
            for (i = 0; i < C_W; i = i + 1)
                if (c[i]) value_of = value_of + ((C_SIGNED != 0 && i == C_W - 1) ? -(1 << i) : (1 << i));
        end
    endfunction

    // Digit k (-1, 0 or +1) of the canonical signed digit form of v: the odd residue mod 4 gives -1 or +1.
    function integer csd_digit(input integer v, input integer k);
        integer i, x, d;
        begin
            x = v;
            csd_digit = 0;
            for (i = 0; i <= k; i = i + 1) begin
                d = ((x & 1) != 0) ? 2 - (x & 3) : 0;
                x = (x - d) >>> 1;
                if (i == k) csd_digit = d;
            end
        end
    endfunction

    // The digit that starts the sum: the lowest +1 digit, so that no negation is spent (a negation costs as
    // much as an adder); the lowest -1 digit when there is no +1; NDIG for a zero constant.
    function integer first_start(input integer v);
        integer i, plus, minus;
        begin
            plus = NDIG;
            minus = NDIG;
            for (i = NDIG - 1; i >= 0; i = i - 1) begin
                if (i < P_W && csd_digit(v, i) > 0) plus = i;
                if (i < P_W && csd_digit(v, i) < 0) minus = i;
            end
            first_start = plus < NDIG ? plus : minus;
        end
    endfunction

    // a sign- or zero-extended to the product width; term k is it shifted by k, wrapping at P_W bits.
    /* verilator lint_off UNUSEDSIGNAL */
    wire [P_W-1:0] ax;  // a zero constant reads nothing, a constant's top digit may shift bits out
    /* verilator lint_on UNUSEDSIGNAL */
    generate
        if (A_SIGNED != 0) begin : g_a_signed
            assign ax = {{C_W{a[A_W-1]}}, a};
        end else begin : g_a_unsigned
            assign ax = {{C_W{1'b0}}, a};
        end
    endgenerate

    // The sum runs over the digits in order, starting at digit FIRST: g_digit[k].s holds the digits
    // 0 .. k (and FIRST) added so far. Zero digits pass the sum on, so only non-zero digits after the first
    // cost an adder. Digits at or above P_W are shifted out entirely and add nothing modulo 2**P_W. The
    // partial sums are kept: otherwise yosys merges the chain (and the adder tree after it) into one
    // multi-operand $macc built from LUT full adders, which costs about twice the carry-chain adders.
    genvar k;
    generate
        for (k = 0; k < NDIG; k = k + 1) begin : g_digit
            localparam integer D = k < P_W ? csd_digit(CV, k) : 0;
            /* verilator lint_off UNUSEDSIGNAL */
            (* keep *) wire [P_W-1:0] s;  // unread while it is a constant zero
            wire [P_W-1:0] t = ax << k;
            wire [P_W-1:0] so_far;  // the sum so far, with the starting digit's term in it
            /* verilator lint_on UNUSEDSIGNAL */
            if (k == 0) begin : g_origin
                if (FIRST < NDIG && FIRST > 0 && csd_digit(CV, FIRST) > 0) begin : g_seeded
                    assign so_far = ax << FIRST;
                end else begin : g_empty
                    assign so_far = {P_W{1'b0}};
                end
            end else begin : g_chain
                assign so_far = g_digit[k-1].s;
            end
            if (D == 0 || (k == FIRST && k > 0 && D > 0)) begin : g_pass  // the seed was placed at k = 0
                assign s = so_far;
            end else if (k == FIRST && D > 0) begin : g_start
                assign s = t;
            end else if (D > 0) begin : g_add
                assign s = so_far + t;
            end else if (k == FIRST) begin : g_negate  // no +1 digit at all: the constant is -2**k
                assign s = {P_W{1'b0}} - t;
            end else begin : g_sub
                assign s = so_far - t;
            end
        end
    endgenerate
    assign p = g_digit[NDIG-1].s;
endmodule
`default_nettype wire
