// bf_kan_basis_closed: the k+1 uniform B-spline weights of a local coordinate u, computed by a small
// circuit instead of a ROM (bitforge basis_impl "closed_form", see bspline.basis_table).
//
// With u = uc / 2^U, k! * b_m(u) is an integer polynomial in u, so in units of 2^-kU the numerators are
// exact integers (cubic: N3 = u^3, N2 = -3u^3 + 3u^2 2^U + 3u 2^2U + 2^3U, N1 = 3u^3 - 6u^2 2^U + 4 2^3U).
// For m >= 1, b_m = floor(N_m 2^F / (k! 2^kU)): a shift by E = kU - F + (k >= 2), then for k = 3 an exact
// floor division by 3 (bf_kan_div3: a multiply-shift by a constant, built from shift-adds). b_0 = 2^F -
// sum(b_m) completes the row: the floors make it >= the exact b_0 >= 0, and the row sums to exactly one.
//
// b packs b_m at [m*B_W +: B_W] as unsigned codes with B_FRAC fractional bits (B_W >= B_FRAC + 1).
// Latency: 1 (k = 1), 2 (k = 2: u^2), 4 (k = 3: u^2, u^3, numerators, division by 3). Needs U >= 1
// (the emitter uses the ROM for U = 0) and B_FRAC >= 0. Registers advance only while ce is high.
`default_nettype none
module bf_kan_basis_closed #(
    parameter integer K = 3,
    parameter integer U = 10,
    parameter integer B_W = 13,
    parameter integer B_FRAC = 12
) (
    input  wire                 clk,
    input  wire                 ce,
    input  wire [U-1:0]         u,
    output wire [(K+1)*B_W-1:0] b
);
    localparam integer QW = B_FRAC + 1;  // every weight fits: b_m <= 2^F
    localparam [QW-1:0] ONE = {1'b1, {B_FRAC{1'b0}}};

    // Weights b_1..b_K, registered by the last stage; b_0 is completed from them.
    wire [K*QW-1:0] bm;  // b_m at [(m-1)*QW +: QW]

    generate
        if (K == 1) begin : g_k1
            // b1 = floor(u 2^F / 2^U): a shift.
            localparam integer NW = U + 1;
            localparam integer E = U - B_FRAC;
            wire [NW-1:0] n1 = {1'b0, u};
            reg [QW-1:0] b1;
            if (E >= 0) begin : g_right
                // verilator lint_off UNUSEDSIGNAL
                wire [NW-1:0] n1_kept = n1;  // the E low bits are floored away
                // verilator lint_on UNUSEDSIGNAL
                always @(posedge clk) if (ce) b1 <= n1_kept[NW-1:E];
            end else begin : g_left
                always @(posedge clk) if (ce) b1 <= {n1, {(-E){1'b0}}};
            end
            assign bm = b1;
        end else if (K == 2) begin : g_k2
            // 2 b2 = u^2, 2 b1 = -2u^2 + 2u + 1 (units 2^-2U); b_m = floor(N 2^F / 2^(2U+1)).
            localparam integer NW = 2 * U + 2;
            localparam integer E = 2 * U + 1 - B_FRAC;
            localparam [NW-1:0] N_ONE = {{(NW-1){1'b0}}, 1'b1} << (2 * U);
            reg [U-1:0] u1;
            reg [2*U-1:0] u2;
            always @(posedge clk) if (ce) begin
                u1 <= u;
                u2 <= u * u;
            end
            wire [NW-1:0] e2 = {2'b00, u2};
            wire [NW-1:0] e1 = {{(U+2){1'b0}}, u1} << U;
            // verilator lint_off UNUSEDSIGNAL
            wire [NW-1:0] n2 = e2;  // the E low bits are floored away
            wire [NW-1:0] n1 = N_ONE + (e1 << 1) - (e2 << 1);
            // verilator lint_on UNUSEDSIGNAL
            reg [QW-1:0] b1, b2;
            if (E >= 0) begin : g_right
                always @(posedge clk) if (ce) begin
                    b1 <= n1[NW-1:E];
                    b2 <= n2[NW-1:E];
                end
            end else begin : g_left
                always @(posedge clk) if (ce) begin
                    b1 <= {n1, {(-E){1'b0}}};
                    b2 <= {n2, {(-E){1'b0}}};
                end
            end
            assign bm = {b2, b1};
        end else begin : g_k3
            localparam integer NW = 3 * U + 3;
            localparam integer E = 3 * U + 1 - B_FRAC;  // 6 = 2 * 3: the 2 goes into the shift
            localparam integer TW = NW - E;             // = B_FRAC + 2, so floor(t / 3) has QW bits
            localparam [NW-1:0] N_ONE = {{(NW-1){1'b0}}, 1'b1} << (3 * U);

            // Stage 1: u^2. Stage 2: u^3.
            reg [U-1:0] u1, u2d;
            // keep: yosys 0.70's synth_ice40 -dsp packs sq1 as the output register of the u*u SB_MAC16 and
            // as the input register of the sq1*u1 one, and leaves that input undriven (x): every cube was wrong
            // in the iCE40 netlist (bitforge simulate --netlist ice40-up5k). A register of its own avoids it.
            (* keep *) reg [2*U-1:0] sq1;
            reg [2*U-1:0] sq2;
            reg [3*U-1:0] cube;
            always @(posedge clk) if (ce) begin
                u1 <= u;
                sq1 <= u * u;
                u2d <= u1;
                sq2 <= sq1;
                cube <= sq1 * u1;
            end
            // Stage 3: numerators by shift-adds (mod 2^NW: each true value lies in [0, 4 2^3U]), then the shift.
            wire [NW-1:0] e3 = {3'b000, cube};
            wire [NW-1:0] e2 = {{(U+3){1'b0}}, sq2} << U;
            wire [NW-1:0] e1 = {{(2*U+3){1'b0}}, u2d} << (2 * U);
            // verilator lint_off UNUSEDSIGNAL
            wire [NW-1:0] n3 = e3;  // the E low bits are floored away
            wire [NW-1:0] n2 = N_ONE + e1 + (e1 << 1) + e2 + (e2 << 1) - e3 - (e3 << 1);
            wire [NW-1:0] n1 = (N_ONE << 2) + e3 + (e3 << 1) - (e2 << 2) - (e2 << 1);
            // verilator lint_on UNUSEDSIGNAL
            reg [TW-1:0] t1, t2, t3;
            if (E >= 0) begin : g_right
                always @(posedge clk) if (ce) begin
                    t1 <= n1[NW-1:E];
                    t2 <= n2[NW-1:E];
                    t3 <= n3[NW-1:E];
                end
            end else begin : g_left
                always @(posedge clk) if (ce) begin
                    t1 <= {n1, {(-E){1'b0}}};
                    t2 <= {n2, {(-E){1'b0}}};
                    t3 <= {n3, {(-E){1'b0}}};
                end
            end
            // Stage 4: floor(t / 3) by shift-adds (bf_kan_div3), then b_0 below.
            wire [QW-1:0] q1, q2, q3;
            bf_kan_div3 #(.W(TW)) u_div1 (.t(t1), .q(q1));
            bf_kan_div3 #(.W(TW)) u_div2 (.t(t2), .q(q2));
            bf_kan_div3 #(.W(TW)) u_div3 (.t(t3), .q(q3));
            reg [QW-1:0] b1, b2, b3;
            always @(posedge clk) if (ce) begin
                b1 <= q1;
                b2 <= q2;
                b3 <= q3;
            end
            assign bm = {b3, b2, b1};
        end
    endgenerate

    // b_0 = 1 - b_1 - ... - b_K (modular in QW bits: the true value lies in [0, 2^F]).
    reg [QW-1:0] b0;
    integer m;
    always @* begin
        b0 = ONE;
        for (m = 0; m < K; m = m + 1) b0 = b0 - bm[m*QW +: QW];
    end

    genvar j;
    generate
        for (j = 0; j <= K; j = j + 1) begin : g_out
            wire [QW-1:0] w = (j == 0) ? b0 : bm[(j == 0 ? 0 : j - 1)*QW +: QW];
            if (B_W > QW) begin : g_wide
                assign b[j*B_W +: B_W] = {{(B_W-QW){1'b0}}, w};
            end else begin : g_exact
                assign b[j*B_W +: B_W] = w;
            end
        end
    endgenerate
endmodule
`default_nettype wire
