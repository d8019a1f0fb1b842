// bf_frame_rx: the receiving half of the frame engine (docs/protocol.md): wire bytes -> COBS decode -> CRC and
// length check -> header fields in registers and the payload (and CRC) in a buffer RAM, then one verdict per
// frame.
//
// Every decoded byte goes through the CRC; bytes 0-3 are the header (type, seq, u16 LE length), bytes 4 on are
// written to the RAM at address (byte - 4). A frame of more than MAX_PAYLOAD + 6 body bytes is too long: the
// rest of it is only counted (dropped) up to its 0x00. At the 0x00 the checks run in the order of the host's
// decoder (runtime/protocol.py): too long, bad COBS, short, bad CRC, bad length; f_valid then pulses with
// f_code 0 (good) or the error code and f_detail. A partial frame followed by TIMEOUT_CLKS clocks without a
// byte ends the same way with the timeout code. f_type/f_seq are body bytes 0 and 1 when they arrived (the
// error frame's request type and seq), else 0.
//
// hold (the engine executes or answers) discards incoming bytes whole: they reach neither the decoder nor
// the timer. The RAM's read port belongs to the engine (raddr -> rdata one clock later).
`default_nettype none
module bf_frame_rx #(
    parameter integer MAX_PAYLOAD = 488,
    parameter integer AW = 9,            // RAM address bits: 2**AW >= MAX_PAYLOAD + 2
    parameter integer TIMEOUT_CLKS = 2000,
    parameter [7:0] E_BAD_CRC = 8'd1,
    parameter [7:0] E_BAD_LENGTH = 8'd2,
    parameter [7:0] E_TOO_LONG = 8'd5,
    parameter [7:0] E_BAD_COBS = 8'd6,
    parameter [7:0] E_TIMEOUT = 8'd7,
    parameter [7:0] E_SHORT = 8'd10
) (
    input  wire          clk,
    input  wire          rst,
    input  wire          hold,
    input  wire          s_valid,
    input  wire [7:0]    s_data,
    output wire          partial,
    output reg           f_valid,
    output reg  [7:0]    f_code,
    output reg  [15:0]   f_detail,
    output reg  [7:0]    f_type,
    output reg  [7:0]    f_seq,
    output reg  [15:0]   f_len,
    input  wire [AW-1:0] raddr,
    output wire [7:0]    rdata
);
    localparam integer MAX_BODY = MAX_PAYLOAD + 6;
    localparam integer TW = TIMEOUT_CLKS > 1 ? $clog2(TIMEOUT_CLKS + 1) : 1;
    /* verilator lint_off WIDTHTRUNC */
    localparam [TW-1:0] T_LAST = TIMEOUT_CLKS - 1;
    localparam [15:0] MAX_BODY16 = MAX_BODY;
    localparam [15:0] MAX_PAYLOAD16 = MAX_PAYLOAD;
    /* verilator lint_on WIDTHTRUNC */

    wire in_valid = s_valid && !hold;
    reg timed_out;
    wire d_valid, end_valid, end_bad;
    wire [7:0] d_data;

    bf_cobs_decode u_dec (
        .clk(clk), .rst(rst), .clear(timed_out),
        .s_valid(in_valid), .s_data(s_data),
        .m_valid(d_valid), .m_data(d_data), .end_valid(end_valid), .end_bad(end_bad), .partial(partial));

    reg [15:0] count;     // body bytes decoded (saturates at MAX_BODY; overflow says there were more)
    reg        overflow;
    reg [7:0]  h_type, h_seq, h_len_lo, h_len_hi;
    wire [15:0] crc;
    wire frame_over = end_valid || timed_out;

    bf_crc16 u_crc (.clk(clk), .init(rst || frame_over), .en(d_valid), .data(d_data), .crc(crc));

    /* verilator lint_off WIDTHTRUNC */
    wire [AW-1:0] waddr = count - 16'd4;
    /* verilator lint_on WIDTHTRUNC */
    bf_ram_sdp #(.AW(AW), .DW(8)) u_ram (
        .clk(clk), .we(d_valid && count >= 16'd4 && count < MAX_BODY16), .waddr(waddr), .wdata(d_data),
        .raddr(raddr), .rdata(rdata));

    // Inter-byte timeout: runs while a partial frame is held, restarts with every byte.
    reg [TW-1:0] timer;
    always @(posedge clk) begin
        timed_out <= 1'b0;
        if (rst || !partial || in_valid) begin
            timer <= {TW{1'b0}};
        end else if (timer == T_LAST) begin
            timed_out <= 1'b1;
            timer <= {TW{1'b0}};
        end else begin
            timer <= timer + 1'b1;
        end
    end

    always @(posedge clk) begin
        f_valid <= 1'b0;
        if (rst || frame_over) begin
            count <= 16'd0;
            overflow <= 1'b0;
            h_type <= 8'd0;
            h_seq <= 8'd0;
            h_len_lo <= 8'd0;
            h_len_hi <= 8'd0;
        end else if (d_valid) begin
            if (count == MAX_BODY16) overflow <= 1'b1;
            else count <= count + 16'd1;
            case (count)
                16'd0: h_type <= d_data;
                16'd1: h_seq <= d_data;
                16'd2: h_len_lo <= d_data;
                16'd3: h_len_hi <= d_data;
                default: ;
            endcase
        end
        if (!rst && frame_over) begin
            f_valid <= 1'b1;
            f_type <= h_type;
            f_seq <= h_seq;
            f_len <= {h_len_hi, h_len_lo};
            f_detail <= 16'd0;
            f_code <= 8'd0;
            if (timed_out) begin
                f_code <= E_TIMEOUT;
            end else if (overflow) begin
                f_code <= E_TOO_LONG;
                f_detail <= MAX_PAYLOAD16;
            end else if (end_bad) begin
                f_code <= E_BAD_COBS;
            end else if (count < 16'd6) begin
                f_code <= E_SHORT;
                f_detail <= count;
            end else if (crc != 16'd0) begin
                f_code <= E_BAD_CRC;
            end else if ({h_len_hi, h_len_lo} != count - 16'd6) begin
                f_code <= E_BAD_LENGTH;
                f_detail <= count - 16'd6;
            end
        end
    end
endmodule
`default_nettype wire
