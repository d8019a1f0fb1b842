// bf_cobs_encode: body bytes -> their COBS encoding, written into a buffer RAM as they arrive (no lookahead).
//
// COBS replaces each zero by the distance to the next one, written in front of the block (its code byte), so
// an encoder that sends as it goes must look ahead up to 254 bytes. Writing into a RAM instead needs none: a
// data byte goes to the next free address, and each block's code byte goes to the slot kept for it at the
// block's start once the block closes (at a zero, whose own slot becomes the next block's code slot, or after
// 254 data bytes). The transmitter then sends the buffer as it is. One input byte per clock, except the clock
// after the 254th byte of a block, which writes that block's 0xFF code (s_ready low). The output is byte for
// byte that of the reference encoder (the Python cobs package): a frame whose last block is a full one ends
// without an empty block after it.
//
// start (base) opens a frame at base. finish (only with s_ready, no byte that clock) closes the last block;
// done pulses on the next clock with len, the encoded length (without the 0x00 delimiter) at base. The write
// port (we, waddr, wdata) is combinational, so everything is in the RAM when done pulses.
`default_nettype none
module bf_cobs_encode #(
    parameter integer AW = 9
) (
    input  wire          clk,
    input  wire          rst,
    input  wire          start,
    input  wire [AW-1:0] base,
    input  wire          s_valid,
    output wire          s_ready,
    input  wire [7:0]    s_data,
    input  wire          finish,
    output reg           done,
    output reg  [AW-1:0] len,
    output reg           we,
    output reg  [AW-1:0] waddr,
    output reg  [7:0]    wdata
);
    reg [AW-1:0] base_q;
    reg [AW-1:0] code_at;     // the open block's code slot
    reg [AW-1:0] wp;          // the next data slot
    reg [7:0]    run;         // data bytes in the open block
    reg          full;        // the block just closed after 254 bytes: its 0xFF code is written this clock
    reg          after_full;  // the open block is empty and follows a full one

    assign s_ready = !full;
    wire take = s_valid && !full;

    always @* begin
        we = 1'b0;
        waddr = wp;
        wdata = s_data;
        if (full) begin
            we = 1'b1;
            waddr = code_at;
            wdata = 8'hFF;
        end else if (take) begin
            we = 1'b1;
            if (s_data == 8'h00) begin
                waddr = code_at;
                wdata = run + 8'd1;
            end
        end else if (finish && !after_full) begin
            we = 1'b1;
            waddr = code_at;
            wdata = run + 8'd1;
        end
    end

    always @(posedge clk) begin
        done <= 1'b0;
        if (rst) begin
            full <= 1'b0;
            after_full <= 1'b0;
            run <= 8'd0;
        end else if (start) begin
            base_q <= base;
            code_at <= base;
            wp <= base + 1'b1;
            run <= 8'd0;
            full <= 1'b0;
            after_full <= 1'b0;
        end else if (full) begin
            code_at <= wp;
            wp <= wp + 1'b1;
            full <= 1'b0;
            after_full <= 1'b1;
        end else if (take) begin
            after_full <= 1'b0;
            if (s_data == 8'h00) begin
                code_at <= wp;
                wp <= wp + 1'b1;
                run <= 8'd0;
            end else begin
                wp <= wp + 1'b1;
                if (run == 8'd253) begin
                    run <= 8'd0;
                    full <= 1'b1;
                end else begin
                    run <= run + 8'd1;
                end
            end
        end else if (finish) begin
            done <= 1'b1;
            len <= after_full ? code_at - base_q : wp - base_q;
        end
    end
endmodule
`default_nettype wire
