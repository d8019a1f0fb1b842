// bf_frame_engine: the device side of the wire protocol (docs/protocol.md) between a UART's byte streams and
// a bitforge core's 8-bit board top: receive, check, execute, answer.
//
// Receive (bf_frame_rx): COBS decode, CRC and length check; the payload lands in the RX buffer RAM and
// nothing happens until the whole frame has passed its checks, so a bad frame has no side effect. Execute:
// the request's shape and addresses are checked next (word counts by repeated subtraction: no divider), then
//   hello          the description ROM (the HELLO parameter) with clks_per_bit (from CLKS_PER_BIT, so a board
//                  flow that changes the baud rate needs no regeneration) and the current model_id patched in;
//   infer, infer_batch, learn
//                  the payload streams from the RX buffer into the core (s_tlast on the last byte of each
//                  word; on a learner infer clears learn_enable, bit LE_MASK of byte LE_BYTE of each word)
//                  while its output bytes stream into the answer, both one byte per clock;
//   read_state     one read-back request per state byte (the learner's rb_data is valid for one clock);
//   write_weights  one weight word per clock on wr_en/wr_addr/wr_data (WEIGHTS_RAM builds; model_id -> 0);
//   commit_weights model_id <- the payload.
// Answer: header, payload and CRC go through bf_cobs_encode into the TX buffer RAM, which the transmitter then
// sends with the 0x00 delimiter. An answer is kept at the start of the TX buffer; an error frame is built in
// the last 16 bytes instead, so it never overwrites the kept answer: a request with the type and seq of the
// last executed one (hello excepted, which clears the memory) is answered again from it, not executed again,
// even after error frames in between. Bytes arriving while the engine executes or answers are discarded.
//
// busy: a partial frame is held, or a request is executing or being answered (not the UART's last byte; the
// device top adds that). Type and error codes are parameters so that the generator passes the values of
// bitforge.runtime.protocol; the defaults are the same values (tests/rtl/test_device_wrapper.py checks them).
`default_nettype none
module bf_frame_engine #(
    parameter integer MAX_PAYLOAD = 488,
    parameter integer AW = 9,                    // buffer address bits (see bitforge.toolchain.backends.rtl.device)
    parameter integer TIMEOUT_CLKS = 2000,
    parameter integer CLKS_PER_BIT = 4,
    parameter integer HELLO_LEN = 73,
    parameter [HELLO_LEN*8-1:0] HELLO = {HELLO_LEN{8'h00}},
    parameter integer HELLO_CPB_AT = 36,
    parameter integer HELLO_MID_AT = 40,
    parameter integer IN_BYTES = 1,
    parameter integer OUT_BYTES = 1,
    parameter integer LEARNER = 0,
    parameter integer LE_BYTE = 0,
    parameter [7:0] LE_MASK = 8'h00,
    parameter integer STATE_WORDS = 0,           // 0: no state to read
    parameter integer STATE_BYTES = 1,
    parameter integer RB_AW = 1,
    parameter integer RB_BW = 1,
    parameter integer WEIGHTS_RAM = 0,
    parameter integer W_BYTES = 1,
    parameter integer W_DW = 8,
    parameter integer W_AW = 1,
    parameter integer W_WORDS = 0,
    parameter [7:0] T_HELLO = 8'h01,
    parameter [7:0] T_INFER = 8'h02,
    parameter [7:0] T_INFER_BATCH = 8'h03,
    parameter [7:0] T_LEARN = 8'h04,
    parameter [7:0] T_READ_STATE = 8'h05,
    parameter [7:0] T_WRITE_WEIGHTS = 8'h06,
    parameter [7:0] T_COMMIT_WEIGHTS = 8'h07,
    parameter [7:0] T_ERROR = 8'h7F,
    parameter [7:0] RESPONSE_BIT = 8'h80,
    parameter [7:0] E_BAD_CRC = 8'd1,
    parameter [7:0] E_BAD_LENGTH = 8'd2,
    parameter [7:0] E_UNKNOWN_TYPE = 8'd3,
    parameter [7:0] E_WRONG_SHAPE = 8'd4,
    parameter [7:0] E_TOO_LONG = 8'd5,
    parameter [7:0] E_BAD_COBS = 8'd6,
    parameter [7:0] E_TIMEOUT = 8'd7,
    parameter [7:0] E_UNSUPPORTED = 8'd8,
    parameter [7:0] E_BAD_ADDRESS = 8'd9,
    parameter [7:0] E_SHORT = 8'd10
) (
    input  wire             clk,
    input  wire             rst,
    // UART side
    input  wire             rx_valid,
    input  wire [7:0]       rx_data,
    output wire             tx_valid,
    input  wire             tx_ready,
    output wire [7:0]       tx_data,
    output wire             busy,
    // the core's 8-bit board top
    output wire             c_s_tvalid,
    input  wire             c_s_tready,
    output wire [7:0]       c_s_tdata,
    output wire             c_s_tlast,
    input  wire             c_m_tvalid,
    output wire             c_m_tready,
    input  wire [7:0]       c_m_tdata,
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire             c_m_tlast,           // the engine counts bytes instead
    /* verilator lint_on UNUSEDSIGNAL */
    // learner read-back (tie rb_ready and rb_valid low without a learner)
    output wire             rb_req,
    input  wire             rb_ready,
    output wire [RB_AW-1:0] rb_addr,
    output wire [RB_BW-1:0] rb_byte,
    input  wire             rb_valid,
    input  wire [7:0]       rb_q,
    // reloadable weights (WEIGHTS_RAM builds)
    output reg              wr_en,
    output reg  [W_AW-1:0]  wr_addr,
    output reg  [W_DW-1:0]  wr_data
);
    /* verilator lint_off WIDTHTRUNC */
    /* verilator lint_off WIDTHEXPAND */
    localparam [AW-1:0] ERR_BASE = (1 << AW) - 16;
    localparam [15:0] IN_BYTES16 = IN_BYTES;
    localparam [15:0] OUT_BYTES16 = OUT_BYTES;
    localparam [15:0] W_BYTES16 = W_BYTES;
    localparam [15:0] HELLO_LEN16 = HELLO_LEN;
    localparam [31:0] MAX_PAYLOAD32 = MAX_PAYLOAD;
    localparam [15:0] MAX_READ = MAX_PAYLOAD / STATE_BYTES;  // state words per answer
    localparam [32:0] STATE_WORDS33 = STATE_WORDS;
    localparam [32:0] W_WORDS33 = W_WORDS;
    localparam [15:0] STATE_SAT = STATE_WORDS > 65535 ? 65535 : STATE_WORDS;
    localparam [15:0] W_SAT = W_WORDS > 65535 ? 65535 : W_WORDS;
    localparam [31:0] CPB32 = CLKS_PER_BIT;
    localparam [15:0] STATE_BYTES16 = STATE_BYTES;
    localparam [RB_BW-1:0] RB_LAST = STATE_BYTES - 1;
    localparam [15:0] W_LAST = W_BYTES - 1;
    localparam [15:0] FB_LAST = IN_BYTES - 1;
    localparam [15:0] LE_BYTE16 = LE_BYTE;

    localparam [4:0] S_IDLE = 5'd0, S_COUNT = 5'd1, S_ARGS = 5'd2, S_ARGCHK = 5'd3, S_BEGIN = 5'd4,
                     S_HDR = 5'd5, S_HELLO = 5'd6, S_STREAM = 5'd7, S_RB_REQ = 5'd8, S_RB_WAIT = 5'd9,
                     S_RB_PUSH = 5'd10, S_WRITE = 5'd11, S_COMMIT = 5'd12, S_ERRP = 5'd13, S_CRC = 5'd14,
                     S_FIN = 5'd15, S_DONE = 5'd16, S_SEND = 5'd17;
    localparam [2:0] OP_HELLO = 3'd0, OP_INFER = 3'd1, OP_LEARN = 3'd2, OP_READ = 3'd3, OP_WRITE = 3'd4,
                     OP_COMMIT = 3'd5;

    reg [4:0] st;

    // ---- receive ------------------------------------------------------------------------------------------
    wire partial, f_valid;
    wire [7:0] f_code, f_type, f_seq;
    wire [15:0] f_detail, f_len;
    reg [15:0] ptr, ptr_n;           // RX buffer read pointer; the RAM reads ptr_n, so rx_q is buffer[ptr]
    wire [7:0] rx_q;
    bf_frame_rx #(.MAX_PAYLOAD(MAX_PAYLOAD), .AW(AW), .TIMEOUT_CLKS(TIMEOUT_CLKS), .E_BAD_CRC(E_BAD_CRC),
                  .E_BAD_LENGTH(E_BAD_LENGTH), .E_TOO_LONG(E_TOO_LONG), .E_BAD_COBS(E_BAD_COBS),
                  .E_TIMEOUT(E_TIMEOUT), .E_SHORT(E_SHORT)) u_rx (
        .clk(clk), .rst(rst), .hold(st != S_IDLE), .s_valid(rx_valid), .s_data(rx_data), .partial(partial),
        .f_valid(f_valid), .f_code(f_code), .f_detail(f_detail), .f_type(f_type), .f_seq(f_seq), .f_len(f_len),
        .raddr(ptr_n[AW-1:0]), .rdata(rx_q));

    assign busy = partial || st != S_IDLE;

    // ---- request and answer state --------------------------------------------------------------------------
    reg [2:0]  op;
    reg        err;                    // the answer being built is an error frame
    reg [7:0]  r_type, r_seq;
    reg [15:0] r_len;
    reg [15:0] a_len;                  // answer payload bytes
    reg [7:0]  e_code, e_rtype, e_seq;
    reg [15:0] e_detail;
    reg [15:0] idx;                    // position within the current state's bytes or words
    reg [15:0] rem, k;
    reg [31:0] out_total;
    reg [47:0] arg;                    // the first six payload bytes (read_state: first, count; write_weights: first)
    reg [15:0] fb;                     // byte within the input word being fed
    reg [RB_BW-1:0] rb_b;
    reg [RB_AW-1:0] rb_a;
    reg [7:0]  rb_hold;
    reg [15:0] wb;
    reg [W_BYTES*8-1:0] wshift;        // weight word bytes so far, the newest on top
    /* verilator lint_off UNUSEDSIGNAL */
    wire [W_BYTES*8+7:0] wcat = {rx_q, wshift};  // its low byte is the one shifted out
    /* verilator lint_on UNUSEDSIGNAL */
    wire [W_BYTES*8-1:0] wnext = wcat[W_BYTES*8+7:8];
    reg [W_AW-1:0] wa;
    reg        mem_valid;              // the kept answer answers (mem_type, mem_seq)
    reg [7:0]  mem_type, mem_seq;
    reg [AW-1:0] ans_len, tx_ptr, tx_ptr_n, tx_end, base;
    // The model_id starts as the bitstream's and, like the weights RAM it describes, survives rst.
    /* verilator lint_off PROCASSINIT */
    reg [127:0] model_id = HELLO[HELLO_MID_AT*8 +: 128];
    /* verilator lint_on PROCASSINIT */

    // ---- answer path: CRC, COBS encoder, TX buffer ----------------------------------------------------------
    reg        ab_valid, ab_crc;
    reg [7:0]  ab_data;
    wire       enc_ready, enc_done;
    wire [AW-1:0] enc_len;
    wire       enc_we;
    wire [AW-1:0] enc_waddr;
    wire [7:0] enc_wdata, tx_q;
    wire [15:0] crc;
    wire       ab_fire = ab_valid && enc_ready;
    wire       enc_finish = st == S_FIN && enc_ready;

    bf_crc16 u_crc (.clk(clk), .init(st == S_BEGIN), .en(ab_fire && ab_crc), .data(ab_data), .crc(crc));
    bf_cobs_encode #(.AW(AW)) u_enc (
        .clk(clk), .rst(rst), .start(st == S_BEGIN), .base(base),
        .s_valid(ab_valid), .s_ready(enc_ready), .s_data(ab_data), .finish(enc_finish),
        .done(enc_done), .len(enc_len), .we(enc_we), .waddr(enc_waddr), .wdata(enc_wdata));
    bf_ram_sdp #(.AW(AW), .DW(8)) u_tx_ram (
        .clk(clk), .we(enc_we), .waddr(enc_waddr), .wdata(enc_wdata), .raddr(tx_ptr_n), .rdata(tx_q));

    assign tx_valid = st == S_SEND;
    assign tx_data = tx_ptr == tx_end ? 8'h00 : tx_q;

    // ---- the core's streams -----------------------------------------------------------------------------
    wire feeding = st == S_STREAM && ptr < r_len;
    wire le_clear = LEARNER != 0 && r_type != T_LEARN && fb == LE_BYTE16;
    assign c_s_tvalid = feeding;
    assign c_s_tdata = le_clear ? rx_q & ~LE_MASK : rx_q;
    assign c_s_tlast = fb == FB_LAST;
    wire feed_fire = feeding && c_s_tready;
    wire collecting = st == S_STREAM && idx < a_len;
    assign c_m_tready = collecting && enc_ready;

    assign rb_req = st == S_RB_REQ;
    assign rb_addr = rb_a;
    assign rb_byte = rb_b;

    // ---- hello bytes ---------------------------------------------------------------------------------------
    reg [7:0] hello_byte;
    always @* begin
        hello_byte = HELLO[idx*8 +: 8];
        if (idx >= HELLO_CPB_AT && idx < HELLO_CPB_AT + 4) hello_byte = CPB32[(idx - HELLO_CPB_AT)*8 +: 8];
        if (idx >= HELLO_MID_AT && idx < HELLO_MID_AT + 16) hello_byte = model_id[(idx - HELLO_MID_AT)*8 +: 8];
    end

    // ---- what goes into the answer this clock ---------------------------------------------------------------
    always @* begin
        ab_valid = 1'b0;
        ab_crc = 1'b1;
        ab_data = 8'h00;
        case (st)
            S_HDR: begin
                ab_valid = 1'b1;
                case (idx[1:0])
                    2'd0: ab_data = err ? T_ERROR : r_type | RESPONSE_BIT;
                    2'd1: ab_data = err ? e_seq : r_seq;
                    2'd2: ab_data = err ? 8'd4 : a_len[7:0];
                    default: ab_data = err ? 8'd0 : a_len[15:8];
                endcase
            end
            S_HELLO: begin
                ab_valid = 1'b1;
                ab_data = hello_byte;
            end
            S_STREAM: begin
                ab_valid = c_m_tvalid && collecting;
                ab_data = c_m_tdata;
            end
            S_RB_PUSH: begin
                ab_valid = 1'b1;
                ab_data = rb_hold;
            end
            S_ERRP: begin
                ab_valid = 1'b1;
                case (idx[1:0])
                    2'd0: ab_data = e_code;
                    2'd1: ab_data = e_rtype;
                    2'd2: ab_data = e_detail[7:0];
                    default: ab_data = e_detail[15:8];
                endcase
            end
            S_CRC: begin
                ab_valid = 1'b1;
                ab_crc = 1'b0;
                ab_data = idx[0] ? crc[7:0] : crc[15:8];
            end
            default: ;
        endcase
    end

    // ---- read pointers: the RAMs read the next pointer, so their data is always that of the current one -----
    always @* begin
        ptr_n = ptr;
        case (st)
            S_IDLE: ptr_n = 16'd0;
            S_ARGS, S_WRITE, S_COMMIT: ptr_n = ptr + 16'd1;
            S_ARGCHK: ptr_n = 16'd4;
            S_STREAM: if (feed_fire) ptr_n = ptr + 16'd1;
            default: ;
        endcase
        tx_ptr_n = tx_ptr;
        if (st == S_IDLE && f_valid && f_code == 8'd0 && mem_valid && f_type == mem_type && f_seq == mem_seq &&
            f_type != T_HELLO)
            tx_ptr_n = {AW{1'b0}};
        else if (st == S_DONE && enc_done) tx_ptr_n = base;
        else if (st == S_SEND && tx_ready && tx_ptr != tx_end) tx_ptr_n = tx_ptr + 1'b1;
    end

    // ---- the state machine -----------------------------------------------------------------------------
    task fail;  // answer the request with an error frame
        input [7:0] code;
        input [15:0] detail;
        begin
            err <= 1'b1;
            e_code <= code;
            e_detail <= detail;
            base <= ERR_BASE;
            st <= S_BEGIN;
        end
    endtask

    task answer;  // answer the request with a_len bytes of payload
        input [15:0] len;
        begin
            err <= 1'b0;
            a_len <= len;
            base <= {AW{1'b0}};
            mem_valid <= 1'b0;  // the kept answer is about to be overwritten
            st <= S_BEGIN;
        end
    endtask

    always @(posedge clk) begin
        ptr <= ptr_n;
        tx_ptr <= tx_ptr_n;
        wr_en <= 1'b0;
        if (rst) begin
            st <= S_IDLE;
            mem_valid <= 1'b0;
            err <= 1'b0;
        end else begin
            case (st)
                S_IDLE: if (f_valid) begin
                    r_type <= f_type;
                    r_seq <= f_seq;
                    r_len <= f_len;
                    e_rtype <= f_type;
                    e_seq <= f_seq;
                    idx <= 16'd0;
                    fb <= 16'd0;
                    rem <= f_len;
                    k <= 16'd0;
                    out_total <= 32'd0;
                    if (f_code != 8'd0) begin
                        fail(f_code, f_detail);
                    end else if (mem_valid && f_type == mem_type && f_seq == mem_seq && f_type != T_HELLO) begin
                        tx_end <= ans_len;
                        st <= S_SEND;
                    end else if (f_type == T_HELLO) begin
                        op <= OP_HELLO;
                        if (f_len != 16'd0) fail(E_WRONG_SHAPE, 16'd0);
                        else answer(HELLO_LEN16);
                    end else if (f_type == T_INFER) begin
                        op <= OP_INFER;
                        if (f_len != IN_BYTES16) fail(E_WRONG_SHAPE, IN_BYTES16);
                        else answer(OUT_BYTES16);
                    end else if (f_type == T_INFER_BATCH) begin
                        op <= OP_INFER;
                        st <= S_COUNT;
                    end else if (f_type == T_LEARN) begin
                        op <= OP_LEARN;
                        if (LEARNER == 0) fail(E_UNSUPPORTED, 16'd0);
                        else st <= S_COUNT;
                    end else if (f_type == T_READ_STATE) begin
                        op <= OP_READ;
                        if (STATE_WORDS == 0) fail(E_UNSUPPORTED, 16'd0);
                        else if (f_len != 16'd6) fail(E_WRONG_SHAPE, 16'd6);
                        else st <= S_ARGS;
                    end else if (f_type == T_WRITE_WEIGHTS) begin
                        op <= OP_WRITE;
                        rem <= f_len - 16'd4;
                        if (WEIGHTS_RAM == 0) fail(E_UNSUPPORTED, 16'd0);
                        else if (f_len < 16'd4) fail(E_WRONG_SHAPE, W_BYTES16);
                        else st <= S_COUNT;
                    end else if (f_type == T_COMMIT_WEIGHTS) begin
                        op <= OP_COMMIT;
                        if (WEIGHTS_RAM == 0) fail(E_UNSUPPORTED, 16'd0);
                        else if (f_len != 16'd16) fail(E_WRONG_SHAPE, 16'd16);
                        else answer(16'd0);
                    end else begin
                        fail(E_UNKNOWN_TYPE, 16'd0);
                    end
                end
                S_COUNT: begin  // whole words, at least one, and an answer that fits
                    if (op == OP_WRITE) begin
                        if (rem >= W_BYTES16) begin
                            rem <= rem - W_BYTES16;
                            k <= k + 16'd1;
                        end else if (rem != 16'd0 || k == 16'd0) begin
                            fail(E_WRONG_SHAPE, W_BYTES16);
                        end else begin
                            st <= S_ARGS;
                        end
                    end else begin
                        if (rem >= IN_BYTES16) begin
                            rem <= rem - IN_BYTES16;
                            k <= k + 16'd1;
                            out_total <= out_total + OUT_BYTES;
                        end else if (rem != 16'd0 || k == 16'd0 || out_total > MAX_PAYLOAD32) begin
                            fail(E_WRONG_SHAPE, IN_BYTES16);
                        end else begin
                            answer(out_total[15:0]);
                        end
                    end
                end
                S_ARGS: begin
                    arg <= {rx_q, arg[47:8]};
                    idx <= idx + 16'd1;
                    if (idx == 16'd5) st <= S_ARGCHK;
                end
                S_ARGCHK: begin
                    idx <= 16'd0;
                    if (op == OP_READ) begin
                        if (arg[47:32] == 16'd0 || arg[47:32] > MAX_READ) fail(E_WRONG_SHAPE, 16'd0);
                        else if ({1'b0, arg[31:0]} + {17'd0, arg[47:32]} > STATE_WORDS33) fail(E_BAD_ADDRESS, STATE_SAT);
                        else answer(arg[47:32] * STATE_BYTES16);
                    end else begin
                        if ({1'b0, arg[31:0]} + {17'd0, k} > W_WORDS33) fail(E_BAD_ADDRESS, W_SAT);
                        else answer(16'd0);
                    end
                    rb_a <= arg[RB_AW-1:0];
                    rb_b <= {RB_BW{1'b0}};
                    wa <= arg[W_AW-1:0];
                    wb <= 16'd0;
                end
                S_BEGIN: begin
                    idx <= 16'd0;
                    st <= S_HDR;
                end
                S_HDR: if (ab_fire) begin
                    idx <= idx + 16'd1;
                    if (idx == 16'd3) begin
                        idx <= 16'd0;
                        if (err) st <= S_ERRP;
                        else case (op)
                            OP_HELLO: st <= S_HELLO;
                            OP_INFER, OP_LEARN: st <= S_STREAM;
                            OP_READ: st <= S_RB_REQ;
                            OP_WRITE: st <= S_WRITE;
                            default: st <= S_COMMIT;
                        endcase
                    end
                end
                S_HELLO: if (ab_fire) begin
                    idx <= idx + 16'd1;
                    if (idx == HELLO_LEN16 - 16'd1) begin
                        idx <= 16'd0;
                        st <= S_CRC;
                    end
                end
                S_STREAM: begin
                    if (feed_fire) fb <= fb == FB_LAST ? 16'd0 : fb + 16'd1;
                    if (ab_fire) begin
                        idx <= idx + 16'd1;
                        if (idx == a_len - 16'd1) begin
                            idx <= 16'd0;
                            st <= S_CRC;
                        end
                    end
                end
                S_RB_REQ: if (rb_ready) st <= S_RB_WAIT;
                S_RB_WAIT: if (rb_valid) begin
                    rb_hold <= rb_q;
                    st <= S_RB_PUSH;
                end
                S_RB_PUSH: if (ab_fire) begin
                    st <= S_RB_REQ;
                    if (rb_b == RB_LAST) begin
                        rb_b <= {RB_BW{1'b0}};
                        rb_a <= rb_a + 1'b1;
                        idx <= idx + 16'd1;
                        if (idx == arg[47:32] - 16'd1) begin
                            idx <= 16'd0;
                            st <= S_CRC;
                        end
                    end else begin
                        rb_b <= rb_b + 1'b1;
                    end
                end
                S_WRITE: begin
                    wshift <= wnext;
                    wb <= wb + 16'd1;
                    if (wb == W_LAST) begin
                        wb <= 16'd0;
                        wa <= wa + 1'b1;
                        if (WEIGHTS_RAM != 0) begin
                            wr_en <= 1'b1;
                            wr_addr <= wa;
                            wr_data <= wnext[W_DW-1:0];
                            model_id <= 128'd0;  // weights being loaded: model unknown until commit_weights
                        end
                        idx <= idx + 16'd1;
                        if (idx == k - 16'd1) begin
                            idx <= 16'd0;
                            st <= S_CRC;
                        end
                    end
                end
                S_COMMIT: begin
                    if (WEIGHTS_RAM != 0) model_id <= {rx_q, model_id[127:8]};
                    idx <= idx + 16'd1;
                    if (idx == 16'd15) begin
                        idx <= 16'd0;
                        st <= S_CRC;
                    end
                end
                S_ERRP: if (ab_fire) begin
                    idx <= idx + 16'd1;
                    if (idx == 16'd3) begin
                        idx <= 16'd0;
                        st <= S_CRC;
                    end
                end
                S_CRC: if (ab_fire) begin
                    idx <= idx + 16'd1;
                    if (idx == 16'd1) st <= S_FIN;
                end
                S_FIN: if (enc_ready) st <= S_DONE;
                S_DONE: if (enc_done) begin
                    tx_end <= base + enc_len;
                    if (!err) begin
                        ans_len <= enc_len;
                        if (op != OP_HELLO) begin  // hello always executes, so it is never kept
                            mem_valid <= 1'b1;
                            mem_type <= r_type;
                            mem_seq <= r_seq;
                        end
                    end
                    st <= S_SEND;
                end
                S_SEND: if (tx_ready && tx_ptr == tx_end) st <= S_IDLE;
                default: st <= S_IDLE;
            endcase
        end
    end
    /* verilator lint_on WIDTHEXPAND */
    /* verilator lint_on WIDTHTRUNC */
endmodule
`default_nettype wire
