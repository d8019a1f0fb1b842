// bf_kan_basis_rom: the k+1 basis weights of a local coordinate u read from a ROM that holds
// bspline.basis_table (any basis_impl; the emitter packs the golden model's own table).
//
// TABLE packs row uc, weight m at [(uc*(K+1) + m)*B_W +: B_W]. The ROM is a memory initialised from the
// parameter and read through a register, the form yosys maps to block RAM / LUT ROM.
// Latency 1; the read register advances only while ce is high.
`default_nettype none
module bf_kan_basis_rom #(
    parameter integer K = 3,
    parameter integer U = 8,
    parameter integer B_W = 13,
    parameter [(1 << U)*(K+1)*B_W-1:0] TABLE = 0
) (
    input  wire                       clk,
    input  wire                       ce,
    input  wire [((U > 0) ? U : 1)-1:0] u,
    output reg  [(K+1)*B_W-1:0]       b
);
    localparam integer ROWS = 1 << U;
    localparam integer RW = (K + 1) * B_W;

    reg [RW-1:0] rom [0:ROWS-1];
    integer r;
    initial begin
        for (r = 0; r < ROWS; r = r + 1) rom[r] = TABLE[r*RW +: RW];
    end

    generate
        if (U > 0) begin : g_rows
            always @(posedge clk) if (ce) b <= rom[u];
        end else begin : g_one_row
            // verilator lint_off UNUSEDSIGNAL
            wire unused_u = u[0];  // one row: u is always zero
            // verilator lint_on UNUSEDSIGNAL
            always @(posedge clk) if (ce) b <= rom[0];
        end
    endgenerate
endmodule
`default_nettype wire
