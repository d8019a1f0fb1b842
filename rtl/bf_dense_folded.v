// bf_dense_folded: y = W x + b with reuse factor R: a few multipliers, each serving up to R products per
// sample, weights in a ROM; a new sample every R cycles (II = R).
//
// Bit-exact with emulate.dense_stage, like bf_dense_parallel: exact products, exact sums, the bias aligned
// to ACC_FRAC, the accumulator overflow (ACC_*) on the final sum, then bf_requant to the output type.
//
// Schedule: a tiling, chosen so that the tail (bias, requantize) is shared instead of built per output.
// The L = S * G multipliers ("lanes") form G groups of S. Each cycle a group works on one output row: lane s
// of it multiplies input s*T + t by that row's weight, a bf_adder_tree sums the S products, and after T
// cycles (t = 0 .. T-1) the row is done. Q passes of T cycles cover the rows, G at a time: pass q gives
// rows q*G .. q*G + G - 1, so C = Q * T <= R cycles do the work and the rest of the R are idle. tiling()
// picks T to minimise L, then G. L = N_IN * N_OUT / R exactly when R divides N_OUT (T = 1, S = N_IN: one
// tree per group, no accumulation) or when N_IN divides R and R / N_IN divides N_OUT (S = 1, T = N_IN: an
// accumulator per row); otherwise padding (rows or inputs with zero weights) can cost a few more lanes
// than ceil(N_IN * N_OUT / R).
//
// Why this is lean: each sample is held once, in `rot` (for T > 1 it also rotates, each lane's chunk of T
// inputs by one place per cycle, so a lane always reads a fixed place: no input multiplexer); the weights,
// the biases of the rows each group finishes and three flags (first/last cycle of a row, last cycle of
// the sample) are one ROM word per cycle: a synchronous-read memory initialised from the parameters, which
// yosys maps to block RAM (ROM_STYLE = 1 asks for it; 0 lets synthesis choose); a group has one accumulator,
// and the finished rows shift into the output register, which is therefore the only per-output storage.
//
// Timing. A sample is accepted into `rot` while the previous one issues its last cycle (c = R - 1), so II
// is exactly R. The ROM is read a cycle ahead, so in issue cycle c the multipliers see `rot` and ROM word c
// straight from registers. Registers, all loading on `advance` (= !out_valid || out_ready, the stall-able
// pipeline of stages.py), that a row passes: the product register (bf_mul), the tree's TL = $clog2(S) /
// LEVELS_PER_STAGE registers, the group accumulator (bias + the T tree sums), the output shift register.
// LATENCY = C + 3 + TL cycles (the accept cycle, C issue cycles, the last of which loads the product
// register, TL tree registers, the accumulator, the output register), II = R, in_ready = advance && `rot`
// is free (idle, or in its last issue cycle).
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
    // ACT = 1: the output is requantize(max(y, 0)) in the Y type (a ReLU fused into this stage, no register
    // of its own); ACT = 0: Y_* must equal OUT_*.
    parameter integer ACT = 0,
    parameter integer Y_W = OUT_W,
    parameter integer Y_FRAC = OUT_FRAC,
    parameter integer Y_SIGNED = OUT_SIGNED,
    parameter integer Y_ROUNDING = OUT_ROUNDING,
    parameter integer Y_OVERFLOW = OUT_OVERFLOW,
    parameter integer LEVELS_PER_STAGE = 2,
    parameter integer ROM_STYLE = 1
) (
    input  wire                   clk,
    input  wire                   rst,
    input  wire                   in_valid,
    output wire                   in_ready,
    input  wire [N_IN*IN_W-1:0]   in_data,
    output wire                   out_valid,
    input  wire                   out_ready,
    output wire [N_OUT*Y_W-1:0]   out_data
);
    // ---- the tiling (dense.folded_tiling computes the same) ---------------------------------------------
    // The T of 1 .. min(R, N_IN) with the fewest lanes, then the fewest groups, then the smallest T.
    function integer tiling(input integer unused);
        integer t, g, l, best_l, best_g;
        begin
            best_l = 0;
            best_g = 0;
            tiling = 1;
            for (t = 1; t <= N_IN && t <= R; t = t + 1) begin
                g = (N_OUT + R / t - 1) / (R / t);
                l = ((N_IN + t - 1) / t) * g;
                if (best_l == 0 || l < best_l || (l == best_l && g < best_g)) begin
                    best_l = l;
                    best_g = g;
                    tiling = t;
                end
            end
        end
    endfunction
    localparam integer T0 = tiling(0);
    localparam integer S = (N_IN + T0 - 1) / T0;          // lanes per group
    localparam integer T = (N_IN + S - 1) / S;            // cycles per row
    localparam integer G = (N_OUT + R / T0 - 1) / (R / T0);  // groups (rows per pass)
    localparam integer Q = (N_OUT + G - 1) / G;           // passes
    localparam integer C = Q * T;                         // cycles of work, <= R
    localparam integer L = S * G;                         // lanes = multipliers
    localparam integer TL = $clog2(S) / LEVELS_PER_STAGE;  // tree registers
    /* verilator lint_off UNUSEDPARAM */
    localparam integer LATENCY = C + 3 + TL;  // the emitter computes the same
    /* verilator lint_on UNUSEDPARAM */

    localparam integer CW = R > 1 ? $clog2(R) : 1;
    /* verilator lint_off WIDTHTRUNC */
    localparam [CW-1:0] LAST = R - 1;
    /* verilator lint_on WIDTHTRUNC */
    localparam integer P_W = IN_W + W_W;
    localparam integer P_SIGNED = (IN_SIGNED != 0 || W_SIGNED != 0) ? 1 : 0;
    localparam integer SUM_W = P_W + $clog2(S);                       // a tree's exact sum
    localparam integer TS_W = SUM_W + (P_SIGNED != 0 ? 0 : 1);        // its signed view
    localparam integer SH = ACC_FRAC - B_FRAC;                        // bias alignment (>= 0)
    localparam integer BA_W = B_W + SH + (B_SIGNED != 0 ? 0 : 1);     // aligned bias, signed
    localparam integer RS_W = TS_W + $clog2(T);                       // sum of T tree sums
    // The accumulator: exact bias + sum (the carry bit), or the sum and a spare bit; wider than both, so
    // every sign extension below is non-empty.
    localparam integer A_W = (HAS_BIAS != 0 && BA_W > RS_W ? BA_W : RS_W) + 1;
    localparam integer F = L * W_W;                                   // flags' place in a ROM word
    localparam integer ROM_W = F + 3 + (HAS_BIAS != 0 ? G * B_W : 0);

    // ROM word of cycle c: lane l = g*S + s at [l*W_W +: W_W], flags {last, done, first} at F, then the
    // group biases at F + 3 + g*B_W. Words past the work (c >= C) are zero: no flags, no products.
    function [ROM_W-1:0] rom_word(input integer c);
        integer g, s, o, i;
        begin
            rom_word = {ROM_W{1'b0}};
            if (c < C) begin
                for (g = 0; g < G; g = g + 1) begin
                    o = (c / T) * G + g;
                    for (s = 0; s < S; s = s + 1) begin
                        i = s * T + c % T;
                        if (o < N_OUT && i < N_IN)
                            rom_word[(g*S + s)*W_W +: W_W] = WEIGHTS[(o*N_IN + i)*W_W +: W_W];
                    end
                    if (HAS_BIAS != 0 && o < N_OUT) rom_word[F + 3 + g*B_W +: B_W] = BIAS[o*B_W +: B_W];
                end
                rom_word[F] = (c % T) == 0;
                rom_word[F + 1] = (c % T) == T - 1;
                rom_word[F + 2] = c == C - 1;
            end
        end
    endfunction

    wire advance = !out_valid || out_ready;

    // ---- issue: cycle counter, input register, ROM ------------------------------------------------------
    reg busy;
    reg [CW-1:0] c;
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

    // S chunks of T inputs; chunk s holds inputs s*T .. s*T + T - 1 (zero past N_IN) and rotates by one
    // place per cycle when T > 1, so lane s reads input s*T + t at the chunk's place 0 in cycle t.
    reg [S*T*IN_W-1:0] rot;
    wire [S*T*IN_W-1:0] loaded;
    generate
        if (S * T > N_IN) begin : g_pad
            assign loaded = {{(S*T - N_IN)*IN_W{1'b0}}, in_data};
        end else begin : g_full
            assign loaded = in_data;
        end
    endgenerate
    genvar g, s;
    generate
        if (T > 1) begin : g_rotate
            for (s = 0; s < S; s = s + 1) begin : g_chunk
                localparam integer B = s * T * IN_W;  // the chunk's place 0
                always @(posedge clk) begin
                    if (advance) begin
                        if (accept) rot[B +: T*IN_W] <= loaded[B +: T*IN_W];
                        else if (busy) rot[B +: T*IN_W] <= {rot[B +: IN_W], rot[B + IN_W +: (T-1)*IN_W]};
                    end
                end
            end
        end else begin : g_hold
            always @(posedge clk) begin
                if (advance && accept) rot <= loaded;
            end
        end
    endgenerate

    // Read a cycle ahead (the next cycle's c), so that in issue cycle c `word` is ROM word c.
    wire [CW-1:0] c_next = (!busy || c == LAST) ? {CW{1'b0}} : c + 1'b1;
    wire [ROM_W-1:0] word;
    generate
        if (ROM_STYLE != 0) begin : g_block_rom
            (* rom_style = "block" *) reg [ROM_W-1:0] rom [0:R-1];
            integer init_c;
            initial begin
                for (init_c = 0; init_c < R; init_c = init_c + 1) rom[init_c] = rom_word(init_c);
            end
            reg [ROM_W-1:0] q;
            always @(posedge clk) begin
                if (advance) q <= rom[c_next];
            end
            assign word = q;
        end else begin : g_rom
            reg [ROM_W-1:0] rom [0:R-1];
            integer init_c;
            initial begin
                for (init_c = 0; init_c < R; init_c = init_c + 1) rom[init_c] = rom_word(init_c);
            end
            reg [ROM_W-1:0] q;
            always @(posedge clk) begin
                if (advance) q <= rom[c_next];
            end
            assign word = q;
        end
    endgenerate

    // ---- products, registered with the flags and biases of their cycle ------------------------------------
    wire [L*P_W-1:0] prod;
    generate
        for (g = 0; g < G; g = g + 1) begin : g_mul_group
            for (s = 0; s < S; s = s + 1) begin : g_mul
                bf_mul #(
                    .A_W(IN_W), .A_FRAC(IN_FRAC), .A_SIGNED(IN_SIGNED),
                    .B_W(W_W), .B_FRAC(W_FRAC), .B_SIGNED(W_SIGNED), .OUT_REG(1)
                ) u_mul (.clk(clk), .en(advance), .a(rot[s*T*IN_W +: IN_W]), .b(word[(g*S + s)*W_W +: W_W]),
                         .p(prod[(g*S + s)*P_W +: P_W]));
            end
        end
    endgenerate

    // The flags {last, done, first} and the biases wait beside the products and the tree: stage 0 is the
    // product register, stage k the tree's k-th register. done and last mean something only while busy.
    reg [3*(TL+1)-1:0] flags;
    wire [2:0] flags_in = {busy && word[F + 2], busy && word[F + 1], word[F]};
    generate
        if (TL > 0) begin : g_flags_wait
            always @(posedge clk) begin
                if (rst) flags <= {3*(TL+1){1'b0}};
                else if (advance) flags <= {flags[3*TL-1:0], flags_in};
            end
        end else begin : g_flags
            always @(posedge clk) begin
                if (rst) flags <= 3'b000;
                else if (advance) flags <= flags_in;
            end
        end
    endgenerate
    wire first = flags[3*TL];
    wire done_t = flags[3*TL + 1];
    wire last_t = flags[3*TL + 2];

    // ---- per group: tree, accumulator (bias + T tree sums), requantize -----------------------------------
    reg done_a, last_a;
    always @(posedge clk) begin
        if (rst) begin
            done_a <= 1'b0;
            last_a <= 1'b0;
        end else if (advance) begin
            done_a <= done_t;
            last_a <= last_t;
        end
    end

    wire [G*Y_W-1:0] rows;  // the rows the groups finished, group g at [g*Y_W +: Y_W]
    generate
        for (g = 0; g < G; g = g + 1) begin : g_group
            wire [SUM_W-1:0] sum;
            bf_adder_tree #(.N(S), .IN_W(P_W), .IN_SIGNED(P_SIGNED), .LEVELS_PER_STAGE(LEVELS_PER_STAGE))
                u_tree (.clk(clk), .en(advance), .in_data(prod[g*S*P_W +: S*P_W]), .out_data(sum));

            wire [A_W-1:0] sum_x;
            if (P_SIGNED != 0) begin : g_sum_signed
                assign sum_x = {{(A_W - SUM_W){sum[SUM_W-1]}}, sum};
            end else begin : g_sum_unsigned
                assign sum_x = {{(A_W - SUM_W){1'b0}}, sum};
            end
            wire [A_W-1:0] seed;  // what a row starts from: its aligned bias, or zero
            if (HAS_BIAS != 0) begin : g_bias
                // The ROM's bias field waits beside the products and the tree (stage 0 .. TL, like flags).
                reg [(TL+1)*B_W-1:0] b_wait;
                if (TL > 0) begin : g_wait
                    always @(posedge clk) begin
                        if (advance) b_wait <= {b_wait[TL*B_W-1:0], word[F + 3 + g*B_W +: B_W]};
                    end
                end else begin : g_now
                    always @(posedge clk) begin
                        if (advance) b_wait <= word[F + 3 + g*B_W +: B_W];
                    end
                end
                wire [B_W-1:0] b = b_wait[TL*B_W +: B_W];
                wire [B_W:0] bs = {B_SIGNED != 0 ? b[B_W-1] : 1'b0, b};
                /* verilator lint_off UNUSEDSIGNAL */
                wire [B_W+SH+1:0] ba = {{(SH + 1){1'b0}}, bs} << SH;  // bits past BA_W are not read
                /* verilator lint_on UNUSEDSIGNAL */
                assign seed = {{(A_W - BA_W){ba[BA_W-1]}}, ba[BA_W-1:0]};
            end else begin : g_no_bias
                assign seed = {A_W{1'b0}};
            end

            reg [A_W-1:0] acc;
            always @(posedge clk) begin
                if (advance) acc <= (first ? seed : acc) + sum_x;
            end

            wire [OUT_W-1:0] row;
            bf_bias_requant #(
                .SUM_W(A_W), .SUM_SIGNED(1), .HAS_BIAS(0),
                .ACC_W(ACC_W), .ACC_FRAC(ACC_FRAC), .ACC_SIGNED(ACC_SIGNED), .ACC_OVERFLOW(ACC_OVERFLOW),
                .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
            ) u_out (.sum(acc), .out_code(row));

            bf_activation #(
                .ACT(ACT), .IN_W(OUT_W), .IN_FRAC(OUT_FRAC), .IN_SIGNED(OUT_SIGNED),
                .OUT_W(Y_W), .OUT_FRAC(Y_FRAC), .OUT_SIGNED(Y_SIGNED), .OUT_ROUNDING(Y_ROUNDING),
                .OUT_OVERFLOW(Y_OVERFLOW)
            ) u_act (.in_code(row), .out_code(rows[g*Y_W +: Y_W]));
        end
    endgenerate

    // ---- output: finished rows shift in from the top, pass 0 ends at the bottom --------------------------
    /* verilator lint_off UNUSEDSIGNAL */
    reg [Q*G*Y_W-1:0] y;  // rows past N_OUT (the last pass's padding) are not read
    /* verilator lint_on UNUSEDSIGNAL */
    reg y_valid;
    generate
        if (Q > 1) begin : g_shift
            always @(posedge clk) begin
                if (advance && done_a) y <= {rows, y[Q*G*Y_W-1:G*Y_W]};
            end
        end else begin : g_load
            always @(posedge clk) begin
                if (advance && done_a) y <= rows;
            end
        end
    endgenerate
    always @(posedge clk) begin
        if (rst) y_valid <= 1'b0;
        else if (advance) y_valid <= last_a;
    end
    assign out_valid = y_valid;
    assign out_data = y[N_OUT*Y_W-1:0];
endmodule
`default_nettype wire
