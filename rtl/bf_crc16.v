// bf_crc16: CRC-16/CCITT-FALSE (polynomial 0x1021, initial value 0xFFFF, not reflected, no final XOR), one
// byte per clock, most significant bit first: the CRC of the wire protocol (docs/protocol.md). The CRC of a
// whole body whose CRC is appended most significant byte first is 0, so a receiver checks a frame by running
// every byte it got through this register and comparing with zero.
//
// init (priority) loads 0xFFFF; en folds data into crc on the clock edge. The eight shift steps of a byte are
// one combinational function (a few XORs per bit after synthesis).
`default_nettype none
module bf_crc16 (
    input  wire        clk,
    input  wire        init,
    input  wire        en,
    input  wire [7:0]  data,
    output reg  [15:0] crc
);
    function [15:0] step;
        input [15:0] c;
        input [7:0] d;
        integer i;
        reg [15:0] x;
        begin
            x = c ^ {d, 8'h00};
            for (i = 0; i < 8; i = i + 1)
                x = x[15] ? ({x[14:0], 1'b0} ^ 16'h1021) : {x[14:0], 1'b0};
            step = x;
        end
    endfunction

    always @(posedge clk) begin
        if (init) crc <= 16'hFFFF;
        else if (en) crc <= step(crc, data);
    end
endmodule
`default_nettype wire
