// bf_dense_folded: y = W x + b with reuse factor R: M = ceil(N_IN*N_OUT / R) multipliers, each serving R
// products per sample; a new sample every R cycles (II = R).
//
// Bit-exact with emulate.dense_stage, like bf_dense_parallel: exact products, exact sums, the bias aligned
// to ACC_FRAC, the accumulator overflow (ACC_*) on the final sum, then bf_requant to the output type.
//
// Schedule. Number the products k = o*N_IN + i (row-major, WEIGHTS packs w_oi at [k*W_W +: W_W]) and pad
// them with zero weights to M*R. Multiplier m computes products m*R .. m*R + R - 1, one per cycle c:
//   * its weights come from a ROM word per cycle (all M lanes side by side: one memory of R words that
//     synthesis may put in block RAM or LUTs; initialised from the parameter, no external file);
//   * its inputs come from a rotating register: the sample is loaded into it and rotated by one element
//     per cycle, so position p holds x[(p + c) mod N_IN] and multiplier m always reads the fixed position
//     (m*R) mod N_IN. No input multiplexers at all.
// A multiplier's R consecutive products cross row boundaries, so it accumulates one *fragment* per row it
// touches: a ROM bit per (lane, cycle) marks the last product of a fragment, and the finished fragment is
// shifted into the lane's fragment chain. After the last cycle every fragment of the sample sits at a
// known chain position; output o's fragments (from multipliers floor(o*N_IN/R) .. floor(((o+1)*N_IN-1)/R),
// at most ceil(N_IN/R) + 1 of them; MAXF at most over all outputs) are summed by bf_adder_tree and end in
// bf_bias_requant and the output register, as in the parallel form.
//
// Timing. A sample is accepted into the rotator while the previous one issues its last cycle, so the
// rotator doubles as the input buffer and the II is exactly R. The ROM is read a cycle ahead, so in issue
// cycle c the multipliers see the rotator and ROM word c straight from registers. Registers, all loading on
// `advance` (= !out_valid || out_ready, the stall-able pipeline of stages.py), that a sample passes:
//   1 accept (rotator, ROM word 0) + R products (one per issue cycle, bf_mul's register) + 1 accumulate
//   into the fragment chain + $clog2(MAXF) / LEVELS_PER_STAGE tree registers + 1 output register.
// LATENCY = R + 3 + $clog2(MAXF) / LEVELS_PER_STAGE cycles, II = R, in_ready = advance && the rotator
// is free (idle, or in its last issue cycle). The fragment chains are read by the tail one cycle after
// they are final, and the next sample cannot overwrite them before that cycle, so no snapshot is needed.
`default_nettype none
module bf_dense_folded #(
    parameter integer N_IN = 4,
    parameter integer N_OUT = 2,
    parameter integer R = 2,
    parameter integer IN_W = 8,
    parameter integer IN_FRAC = 0,
    parameter integer IN_SIGNED = 1,
    parameter integer W_W = 8,
    parameter integer W_FRAC = 0,
    parameter integer W_SIGNED = 1,
    parameter [N_OUT*N_IN*W_W-1:0] WEIGHTS = {N_OUT*N_IN*W_W{1'b0}},
    parameter integer HAS_BIAS = 0,
    parameter integer B_W = 8,
    parameter integer B_FRAC = 0,
    parameter integer B_SIGNED = 1,
    parameter [N_OUT*B_W-1:0] BIAS = {N_OUT*B_W{1'b0}},
    parameter integer ACC_W = 24,
    parameter integer ACC_FRAC = 0,
    parameter integer ACC_SIGNED = 1,
    parameter integer ACC_OVERFLOW = 0,
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 0,
    parameter integer OUT_SIGNED = 1,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0,
    parameter integer LEVELS_PER_STAGE = 2
) (
    input  wire                   clk,
    input  wire                   rst,
    input  wire                   in_valid,
    output wire                   in_ready,
    input  wire [N_IN*IN_W-1:0]   in_data,
    output wire                   out_valid,
    input  wire                   out_ready,
    output wire [N_OUT*OUT_W-1:0] out_data
);
    localparam integer K = N_IN * N_OUT;
    localparam integer M = (K + R - 1) / R;
    localparam integer CW = R > 1 ? $clog2(R) : 1;
    localparam integer LANE_W = W_W + 1;  // {fragment ends here, weight}
    localparam integer P_W = IN_W + W_W;
    localparam integer P_SIGNED = (IN_SIGNED != 0 || W_SIGNED != 0) ? 1 : 0;
    localparam integer FRAG_W = P_W + $clog2(R < N_IN ? R : N_IN);  // at most min(R, N_IN) products
    localparam integer J_MAX = ((R - 1) / N_IN + 2) < R ? ((R - 1) / N_IN + 2) : R;  // fragments per lane
    localparam integer MAXF = max_frags(1);
    localparam integer TREE_L = $clog2(MAXF);
    localparam integer SUM_W = FRAG_W + TREE_L;
    localparam integer TAIL = TREE_L / LEVELS_PER_STAGE + 1;  // tree registers + output register
    /* verilator lint_off UNUSEDPARAM */
    localparam integer LATENCY = R + 3 + TREE_L / LEVELS_PER_STAGE;  // the emitter computes the same
    /* verilator lint_on UNUSEDPARAM */
    /* verilator lint_off WIDTHTRUNC */
    localparam [CW-1:0] LAST = R - 1;
    /* verilator lint_on WIDTHTRUNC */

    // ---- the schedule, as constant functions ----------------------------------------------------------
    function integer first_row(input integer m);
        first_row = (m * R) / N_IN;
    endfunction
    function integer nfrag(input integer m);
        integer end_k;
        begin
            end_k = (m * R + R < K) ? m * R + R : K;  // one past the lane's last real product
            nfrag = (end_k - 1) / N_IN - first_row(m) + 1;
        end
    endfunction
    function integer m_lo(input integer o);
        m_lo = (o * N_IN) / R;
    endfunction
    function integer frags(input integer o);
        frags = ((o + 1) * N_IN - 1) / R - m_lo(o) + 1;
    endfunction
    function integer max_frags(input integer at_least);
        integer o;
        begin
            max_frags = at_least;
            for (o = 0; o < N_OUT; o = o + 1)
                if (frags(o) > max_frags) max_frags = frags(o);
        end
    endfunction
    // ROM word of cycle c: lane m holds {last product of a fragment, weight of product m*R + c}.
    function [M*LANE_W-1:0] rom_word(input integer c);
        integer m, k;
        reg ends;
        begin
            rom_word = {M*LANE_W{1'b0}};
            for (m = 0; m < M; m = m + 1) begin
                k = m * R + c;
                ends = (c == R - 1) || (((k + 1) % N_IN == 0) && (k + 1 < K));
                rom_word[m*LANE_W + W_W] = ends;
                if (k < K) rom_word[m*LANE_W +: W_W] = WEIGHTS[k*W_W +: W_W];
            end
        end
    endfunction

    wire advance = !out_valid || out_ready;

    // ---- issue: rotator, cycle counter, ROM ----------------------------------------------------------
    reg busy;
    reg [CW-1:0] c;
    reg [N_IN*IN_W-1:0] rot;
    wire rot_free = !busy || (c == LAST);
    assign in_ready = advance && rot_free;
    wire accept = in_valid && in_ready;

    always @(posedge clk) begin
        if (rst) begin
            busy <= 1'b0;
            c <= {CW{1'b0}};
        end else if (advance) begin
            if (accept) begin
                busy <= 1'b1;
                c <= {CW{1'b0}};
            end else if (busy) begin
                busy <= c != LAST;
                c <= c + 1'b1;
            end
        end
    end

    generate
        if (N_IN > 1) begin : g_rotate
            always @(posedge clk) begin
                if (advance) begin
                    if (accept) rot <= in_data;
                    else if (busy) rot <= {rot[IN_W-1:0], rot[N_IN*IN_W-1:IN_W]};
                end
            end
        end else begin : g_hold
            always @(posedge clk) begin
                if (advance && accept) rot <= in_data;
            end
        end
    endgenerate

    reg [M*LANE_W-1:0] rom [0:R-1];
    integer init_c;
    initial begin
        for (init_c = 0; init_c < R; init_c = init_c + 1) rom[init_c] = rom_word(init_c);
    end

    // The ROM word is read one cycle ahead (address: the next cycle's c), so in issue cycle c lane_q holds
    // word c, aligned with the rotator: both feed the multipliers straight from registers.
    reg [M*LANE_W-1:0] lane_q;
    wire [CW-1:0] c_next = (!busy || c == LAST) ? {CW{1'b0}} : c + 1'b1;
    always @(posedge clk) begin
        if (advance) lane_q <= rom[c_next];
    end
    reg v1, last1;  // the product registers hold a product of the sample / its last one
    always @(posedge clk) begin
        if (rst) begin
            v1 <= 1'b0;
            last1 <= 1'b0;
        end else if (advance) begin
            v1 <= busy;
            last1 <= busy && (c == LAST);
        end
    end

    // ---- multiply and accumulate, one lane per multiplier -----------------------------------------------
    /* verilator lint_off UNUSEDSIGNAL */
    wire [M*J_MAX*FRAG_W-1:0] frag_flat;  // lane m's chain at slots m*J_MAX ..; slots past nfrag(m) unused
    /* verilator lint_on UNUSEDSIGNAL */
    genvar m, o, t;
    generate
        for (m = 0; m < M; m = m + 1) begin : g_lane
            localparam integer TAP = (m * R) % N_IN;
            localparam integer NF = nfrag(m);

            wire [P_W-1:0] p;
            bf_mul #(
                .A_W(IN_W), .A_FRAC(IN_FRAC), .A_SIGNED(IN_SIGNED),
                .B_W(W_W), .B_FRAC(W_FRAC), .B_SIGNED(W_SIGNED), .OUT_REG(1)
            ) u_mul (.clk(clk), .en(advance), .a(rot[TAP*IN_W +: IN_W]), .b(lane_q[m*LANE_W +: W_W]), .p(p));

            reg ends_q;  // the product in p ends its fragment
            always @(posedge clk) begin
                if (advance) ends_q <= lane_q[m*LANE_W + W_W];
            end

            wire [FRAG_W-1:0] p_x;
            if (FRAG_W > P_W) begin : g_widen
                wire sp = P_SIGNED != 0 ? p[P_W-1] : 1'b0;
                assign p_x = {{(FRAG_W - P_W){sp}}, p};
            end else begin : g_same
                assign p_x = p;
            end

            reg restart;              // the next product starts a fragment
            reg [FRAG_W-1:0] acc;
            reg [NF*FRAG_W-1:0] chain;  // finished fragments, newest at slot 0
            wire [FRAG_W-1:0] s = (restart ? {FRAG_W{1'b0}} : acc) + p_x;
            always @(posedge clk) begin
                if (rst) restart <= 1'b1;
                else if (advance && v1) restart <= ends_q;
            end
            always @(posedge clk) begin
                if (advance && v1) acc <= s;
            end
            if (NF > 1) begin : g_chain
                always @(posedge clk) begin
                    if (advance && v1 && ends_q) chain <= {chain[(NF-1)*FRAG_W-1:0], s};
                end
            end else begin : g_single
                always @(posedge clk) begin
                    if (advance && v1 && ends_q) chain <= s;
                end
            end
            assign frag_flat[m*J_MAX*FRAG_W +: NF*FRAG_W] = chain;
            if (NF < J_MAX) begin : g_pad
                assign frag_flat[(m*J_MAX + NF)*FRAG_W +: (J_MAX - NF)*FRAG_W] = {(J_MAX - NF)*FRAG_W{1'b0}};
            end
        end
    endgenerate

    // ---- tail: sum each output's fragments, bias, requantize, register --------------------------------
    reg fv;                  // the fragment chains hold a finished sample
    reg [TAIL-1:0] tail_v;   // valid bits of the tree registers and of the output register
    always @(posedge clk) begin
        if (rst) fv <= 1'b0;
        else if (advance) fv <= v1 && last1;
    end
    generate
        if (TAIL > 1) begin : g_tail_chain
            always @(posedge clk) begin
                if (rst) tail_v <= {TAIL{1'b0}};
                else if (advance) tail_v <= {tail_v[TAIL-2:0], fv};
            end
        end else begin : g_tail_one
            always @(posedge clk) begin
                if (rst) tail_v <= 1'b0;
                else if (advance) tail_v <= fv;
            end
        end
    endgenerate
    assign out_valid = tail_v[TAIL-1];

    generate
        for (o = 0; o < N_OUT; o = o + 1) begin : g_out
            wire [MAXF*FRAG_W-1:0] fr;
            for (t = 0; t < MAXF; t = t + 1) begin : g_frag
                if (t < frags(o)) begin : g_take
                    localparam integer LANE = m_lo(o) + t;
                    localparam integer SLOT = nfrag(LANE) - 1 - (o - first_row(LANE));
                    assign fr[t*FRAG_W +: FRAG_W] = frag_flat[(LANE*J_MAX + SLOT)*FRAG_W +: FRAG_W];
                end else begin : g_none
                    assign fr[t*FRAG_W +: FRAG_W] = {FRAG_W{1'b0}};
                end
            end

            wire [SUM_W-1:0] sum;
            bf_adder_tree #(.N(MAXF), .IN_W(FRAG_W), .IN_SIGNED(P_SIGNED), .LEVELS_PER_STAGE(LEVELS_PER_STAGE))
                u_tree (.clk(clk), .en(advance), .in_data(fr), .out_data(sum));

            wire [OUT_W-1:0] y;
            bf_bias_requant #(
                .SUM_W(SUM_W), .SUM_SIGNED(P_SIGNED),
                .HAS_BIAS(HAS_BIAS), .B_W(B_W), .B_FRAC(B_FRAC), .B_SIGNED(B_SIGNED), .BIAS(BIAS[o*B_W +: B_W]),
                .ACC_W(ACC_W), .ACC_FRAC(ACC_FRAC), .ACC_SIGNED(ACC_SIGNED), .ACC_OVERFLOW(ACC_OVERFLOW),
                .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
            ) u_out (.sum(sum), .out_code(y));

            reg [OUT_W-1:0] y_q;
            always @(posedge clk) begin
                if (advance) y_q <= y;
            end
            assign out_data[o*OUT_W +: OUT_W] = y_q;
        end
    endgenerate
endmodule
`default_nettype wire
