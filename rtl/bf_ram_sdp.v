// bf_ram_sdp: simple dual-port RAM, one write port and one synchronous read port on the same clock: the form
// yosys maps to block RAM on iCE40 (SB_RAM40_4K), ECP5 (DP16KD) and Gowin (SDPB).
//
// rdata is the word at the raddr of the previous edge. A read of the address written on the same edge returns
// the old word (no bypass: the frame engine never reads what it writes in the same cycle). The contents start
// at zero, so a read beyond what was written is a defined value in simulation too.
`default_nettype none
module bf_ram_sdp #(
    parameter integer AW = 9,
    parameter integer DW = 8
) (
    input  wire          clk,
    input  wire          we,
    input  wire [AW-1:0] waddr,
    input  wire [DW-1:0] wdata,
    input  wire [AW-1:0] raddr,
    output reg  [DW-1:0] rdata
);
    reg [DW-1:0] mem [0:(1 << AW) - 1];
    integer i;
    initial begin
        for (i = 0; i < (1 << AW); i = i + 1) mem[i] = {DW{1'b0}};
        rdata = {DW{1'b0}};
    end
    always @(posedge clk) begin
        if (we) mem[waddr] <= wdata;
        rdata <= mem[raddr];
    end
endmodule
`default_nettype wire
