// bf_dense_folded_ram: bf_dense_folded with its weights and biases in writable memories (--weights ram).
//
// Computes exactly what bf_dense_folded computes (emulate.dense_stage, any weight and bias codes of the
// W_* / B_* types: every width below follows from the types, none from the values), on the same schedule:
// the tiling, the rotating input register, the L = S * G multipliers, the per-group trees, accumulators and
// requantizers, LATENCY = C + 3 + TL, II = R. What changes is where the parameters come from.
//
// Memories. The weights are one memory of WD = 2**clog2(C) words of L lanes (lane l = g*S + s at
// [l*W_W +: W_W]; word c holds what bf_dense_folded's ROM word c holds); the biases are one of QD =
// 2**clog2(Q) words of G lanes (word p holds the biases of the rows of pass p). Both are read synchronously
// a cycle ahead (the block-RAM form; RAM_STYLE = 1 asks for block RAM, 0 leaves it to synthesis: LUT RAM
// or flip-flops), except a memory of one word, which is a plain register read as it is. The flags the ROM
// carried ({last, done, first}) depend only on the architecture, so here they come from the cycle counter
// c, the cycle within a row t = c mod T and the pass p = c div T (counted, no division). Words past the
// work (c >= C, and p past Q - 1, both reached only by wrapping the address) are read but never used:
// their rows never raise `done` and `first` reseeds the accumulator, so stale contents cannot leak.
//
// Write port. One parameter code per clock: wr_data carries the code sign-extended to DATA_W bits (only its low
// W_W or B_W bits are read). Addresses are the device's flat weight address space (manifest.json
// "weights"); this module owns two regions of it: the weights at W_BASE + lane * WD + c (L * WD words)
// and, with HAS_BIAS, the biases at B_BASE + g * QD + p (G * QD words); writes elsewhere are ignored. A
// lane-major region whose row field is a power of two decodes by bit slicing and one range compare, so
// the write port costs two subtractors and compares per layer. The host packs words in this order
// (toolchain/backends/rtl/weights_layout.py). The caller writes only while no sample is in flight; a write
// has no effect on reads until the next sample.
//
// Initial contents: WEIGHTS and BIAS (row-major, as bf_dense_folded's parameters), so the device runs the
// compiled model without a load.
`default_nettype none
module bf_dense_folded_ram #(
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
    parameter integer ACT = 0,
    parameter integer Y_W = OUT_W,
    parameter integer Y_FRAC = OUT_FRAC,
    parameter integer Y_SIGNED = OUT_SIGNED,
    parameter integer Y_ROUNDING = OUT_ROUNDING,
    parameter integer Y_OVERFLOW = OUT_OVERFLOW,
    parameter integer LEVELS_PER_STAGE = 2,
    parameter integer RAM_STYLE = 0,
    parameter integer ADDR_W = 8,          // the device's weight address bits
    parameter integer DATA_W = 8,          // the device's weight word bits (>= W_W and >= B_W)
    parameter integer W_BASE = 0,      // first address of the weight region
    parameter integer B_BASE = 0       // first address of the bias region (HAS_BIAS = 1)
) (
    input  wire                   clk,
    input  wire                   rst,
    input  wire                   in_valid,
    output wire                   in_ready,
    input  wire [N_IN*IN_W-1:0]   in_data,
    output wire                   out_valid,
    input  wire                   out_ready,
    output wire [N_OUT*Y_W-1:0]   out_data,
    input  wire                   wr_en,
    input  wire [ADDR_W-1:0]          wr_addr,
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire [DATA_W-1:0]          wr_data  // the low W_W / B_W bits are the code
    /* verilator lint_on UNUSEDSIGNAL */
);
    // ---- the tiling (dense.folded_tiling and bf_dense_folded compute the same) ---------------------------
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
    function integer clog2(input integer v);
        integer n;
        begin
            n = 0;
            while ((1 << n) < v) n = n + 1;
            clog2 = n;
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
    localparam [CW-1:0] C_LAST = C - 1;
    /* verilator lint_on WIDTHTRUNC */
    localparam integer TW = T > 1 ? $clog2(T) : 1;
    /* verilator lint_off WIDTHTRUNC */
    localparam [TW-1:0] T_LAST = T - 1;
    /* verilator lint_on WIDTHTRUNC */
    localparam integer CA = clog2(C);                     // weight memory address bits (WD = 2**CA words)
    localparam integer WD = 1 << CA;
    localparam integer QA = clog2(Q);                     // bias memory address bits (QD = 2**QA words)
    localparam integer QD = 1 << QA;
    localparam integer PW = QA > 0 ? QA : 1;
    localparam integer P_W = IN_W + W_W;
    localparam integer P_SIGNED = (IN_SIGNED != 0 || W_SIGNED != 0) ? 1 : 0;
    localparam integer SUM_W = P_W + $clog2(S);
    localparam integer TS_W = SUM_W + (P_SIGNED != 0 ? 0 : 1);
    localparam integer SH = ACC_FRAC - B_FRAC;
    localparam integer BA_W = B_W + SH + (B_SIGNED != 0 ? 0 : 1);
    localparam integer RS_W = TS_W + $clog2(T);
    localparam integer A_W = (HAS_BIAS != 0 && BA_W > RS_W ? BA_W : RS_W) + 1;
    localparam integer WWORD = L * W_W;
    localparam integer BWORD = G * B_W;

    // Weight word c (what bf_dense_folded's ROM word c holds, without flags and biases) and bias word p.
    function [WWORD-1:0] weight_word(input integer c);
        integer g, s, o, i;
        begin
            weight_word = {WWORD{1'b0}};
            if (c < C) begin
                for (g = 0; g < G; g = g + 1) begin
                    o = (c / T) * G + g;
                    for (s = 0; s < S; s = s + 1) begin
                        i = s * T + c % T;
                        if (o < N_OUT && i < N_IN)
                            weight_word[(g*S + s)*W_W +: W_W] = WEIGHTS[(o*N_IN + i)*W_W +: W_W];
                    end
                end
            end
        end
    endfunction
    function [BWORD-1:0] bias_word(input integer p);
        integer g, o;
        begin
            bias_word = {BWORD{1'b0}};
            for (g = 0; g < G; g = g + 1) begin
                o = p * G + g;
                if (o < N_OUT) bias_word[g*B_W +: B_W] = BIAS[o*B_W +: B_W];
            end
        end
    endfunction

    wire advance = !out_valid || out_ready;

    // ---- issue: counters, input register -----------------------------------------------------------------
    reg busy;
    reg [CW-1:0] c;
    reg [TW-1:0] t;
    reg [PW-1:0] p;
    wire rot_free = !busy || (c == LAST);
    assign in_ready = advance && rot_free;
    wire accept = in_valid && in_ready;
    // The next cycle's counters: a new sample (or idle) starts at 0; p wraps past Q - 1 only in unused cycles.
    wire restart = !busy || c == LAST;
    wire row_end = t == T_LAST;
    wire [CW-1:0] c_next = restart ? {CW{1'b0}} : c + 1'b1;
    wire [TW-1:0] t_next = (restart || row_end) ? {TW{1'b0}} : t + 1'b1;
    wire [PW-1:0] p_next = restart ? {PW{1'b0}} : (row_end ? p + 1'b1 : p);

    always @(posedge clk) begin
        if (rst) begin
            busy <= 1'b0;
            c <= {CW{1'b0}};
            t <= {TW{1'b0}};
            p <= {PW{1'b0}};
        end else if (advance) begin
            if (accept) busy <= 1'b1;
            else if (busy) busy <= c != LAST;
            c <= c_next;
            t <= t_next;
            p <= p_next;
        end
    end

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
                localparam integer B = s * T * IN_W;
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

    // ---- the write port: which region, lane and word --------------------------------------------------
    /* verilator lint_off WIDTHEXPAND */
    /* verilator lint_off WIDTHTRUNC */
    wire [ADDR_W:0] w_off = {1'b0, wr_addr} - W_BASE;          // wraps (top bit set) below the region
    wire w_hit = wr_en && w_off < L * WD;
    wire [ADDR_W:0] w_lane = w_off >> CA;
    /* verilator lint_off UNUSEDSIGNAL */  // the bias fields: unread without a bias
    wire [ADDR_W:0] b_off = {1'b0, wr_addr} - B_BASE;
    wire b_hit = wr_en && HAS_BIAS != 0 && b_off < G * QD;
    wire [ADDR_W:0] b_group = b_off >> QA;
    wire [B_W-1:0] b_code = wr_data[B_W-1:0];
    /* verilator lint_on UNUSEDSIGNAL */
    /* verilator lint_on WIDTHTRUNC */
    /* verilator lint_on WIDTHEXPAND */
    wire [W_W-1:0] w_code = wr_data[W_W-1:0];

    // ---- the memories, read a cycle ahead so that in issue cycle c `word` is weight word c -------------
    // The lane compares below read an address field against a loop integer (32 bits).
    /* verilator lint_off WIDTHEXPAND */
    wire [WWORD-1:0] word;
    /* verilator lint_off UNUSEDSIGNAL */
    wire [BWORD-1:0] bword;  // no bias: unread
    /* verilator lint_on UNUSEDSIGNAL */
    generate
        if (WD == 1) begin : g_weight_reg
            reg [WWORD-1:0] wreg;
            integer lane;
            initial wreg = weight_word(0);
            always @(posedge clk) begin
                for (lane = 0; lane < L; lane = lane + 1)
                    if (w_hit && w_lane == lane) wreg[lane*W_W +: W_W] <= w_code;
            end
            assign word = wreg;
        end else begin : g_weight_ram
            wire [CA-1:0] w_row = w_off[CA-1:0];
            wire [CA-1:0] rd_row = c_next[CA-1:0];
            reg [WWORD-1:0] q;
            integer lane, init_k;
            if (RAM_STYLE != 0) begin : g_block
                (* ram_style = "block", no_rw_check *) reg [WWORD-1:0] mem [0:WD-1];
                initial for (init_k = 0; init_k < WD; init_k = init_k + 1) mem[init_k] = weight_word(init_k);
                always @(posedge clk) begin
                    for (lane = 0; lane < L; lane = lane + 1)
                        if (w_hit && w_lane == lane) mem[w_row][lane*W_W +: W_W] <= w_code;
                end
                always @(posedge clk) if (advance) q <= mem[rd_row];
            end else begin : g_any
                (* no_rw_check *) reg [WWORD-1:0] mem [0:WD-1];
                initial for (init_k = 0; init_k < WD; init_k = init_k + 1) mem[init_k] = weight_word(init_k);
                always @(posedge clk) begin
                    for (lane = 0; lane < L; lane = lane + 1)
                        if (w_hit && w_lane == lane) mem[w_row][lane*W_W +: W_W] <= w_code;
                end
                always @(posedge clk) if (advance) q <= mem[rd_row];
            end
            assign word = q;
        end
        if (HAS_BIAS == 0) begin : g_no_bias_mem
            assign bword = {BWORD{1'b0}};
        end else if (QD == 1) begin : g_bias_reg
            reg [BWORD-1:0] breg;
            integer lane;
            initial breg = bias_word(0);
            always @(posedge clk) begin
                for (lane = 0; lane < G; lane = lane + 1)
                    if (b_hit && b_group == lane) breg[lane*B_W +: B_W] <= b_code;
            end
            assign bword = breg;
        end else begin : g_bias_ram
            wire [QA-1:0] b_row = b_off[QA-1:0];
            wire [QA-1:0] rd_p = p_next[QA-1:0];
            (* no_rw_check *) reg [BWORD-1:0] bmem [0:QD-1];
            integer lane, init_k;
            initial for (init_k = 0; init_k < QD; init_k = init_k + 1) bmem[init_k] = bias_word(init_k);
            always @(posedge clk) begin
                for (lane = 0; lane < G; lane = lane + 1)
                    if (b_hit && b_group == lane) bmem[b_row][lane*B_W +: B_W] <= b_code;
            end
            reg [BWORD-1:0] bq;
            always @(posedge clk) if (advance) bq <= bmem[rd_p];
            assign bword = bq;
        end
    endgenerate
    /* verilator lint_on WIDTHEXPAND */

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

    // The flags of bf_dense_folded's ROM word c, from the counters: the cycle is work (c < C), it starts a row
    // (t = 0), ends one (t = T - 1), ends the sample (c = C - 1).
    /* verilator lint_off CMPCONST */
    wire work = c <= C_LAST;  // always true when C = R
    /* verilator lint_on CMPCONST */
    reg [3*(TL+1)-1:0] flags;
    wire [2:0] flags_in = {busy && c == C_LAST, busy && work && row_end, work && t == 0};
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

    wire [G*Y_W-1:0] rows;
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
            wire [A_W-1:0] seed;
            if (HAS_BIAS != 0) begin : g_bias
                reg [(TL+1)*B_W-1:0] b_wait;
                if (TL > 0) begin : g_wait
                    always @(posedge clk) begin
                        if (advance) b_wait <= {b_wait[TL*B_W-1:0], bword[g*B_W +: B_W]};
                    end
                end else begin : g_now
                    always @(posedge clk) begin
                        if (advance) b_wait <= bword[g*B_W +: B_W];
                    end
                end
                wire [B_W-1:0] b = b_wait[TL*B_W +: B_W];
                wire [B_W:0] bs = {B_SIGNED != 0 ? b[B_W-1] : 1'b0, b};
                /* verilator lint_off UNUSEDSIGNAL */
                wire [B_W+SH+1:0] ba = {{(SH + 1){1'b0}}, bs} << SH;
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
    reg [Q*G*Y_W-1:0] y;
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
