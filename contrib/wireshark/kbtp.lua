-- kbtp.lua: a Wireshark / tshark dissector for KBTP (KV Cache Block Transfer Protocol).
--
-- KBTP messages travel as the payload of RDMA Sends. Wireshark's InfiniBand dissector
-- decodes RoCEv2 (UDP port 4791) up to the transport headers and offers the payload to
-- the heuristic dissectors of "infiniband.payload"; this one claims the payload of a
-- reliable-connected SEND (First or Only, with or without Immediate or Invalidate) that
-- starts with a KBTP common header: Version 1 and a known Opcode.
--
-- Install: copy this file into Wireshark's personal plugins folder
-- (~/.local/lib/wireshark/plugins/ on Linux; Help > About > Folders shows it), or run
--   tshark --disable-heuristic rpcrdma_infiniband \
--          -X lua_script:contrib/wireshark/kbtp.lua -r run.pcap -Y kbtp
-- Wireshark tries its built-in RPC-over-RDMA heuristic on the same payloads first, and it
-- takes some short KBTP requests for RPC-over-RDMA (shown as Malformed): disable it as
-- above, or in Wireshark under Analyze > Enabled Protocols (rpcrdma_infiniband).
-- Display filter fields are kbtp.<field>, e.g. kbtp.opcode == 0x10, kbtp.status != 0,
-- kbtp.data_descriptor.stag. Preference kbtp.addr_le (Edit > Preferences > Protocols >
-- KBTP, or -o kbtp.addr_le:TRUE) decodes the Block Handle, the Data and Completion
-- Descriptors and the Block Offset of BIND and COMPLETION as little-endian, as a session
-- that negotiated ADDR_LE sends them; HELLO and HELLO_ACK are always big-endian.
--
-- A message longer than one RDMA MTU spans a SEND First, Middle(s) and Last: only the
-- First is decoded (the fields it holds), marked as continued.
--
-- The field table below is the message layout of kbtpsim.wire; the test
-- tests/contrib/test_kbtp_lua.py reads it and checks it against the codec field by field.

local kbtp = Proto("kbtp", "KV Cache Block Transfer Protocol")

-- BEGIN FIELD TABLE (one field per line: key, name, octets (0: the rest), order, presence)
-- order: "be" big-endian; "addr": little-endian when the addr_le preference is set
-- presence: "always", or present only with the RECORD or INLINE flag, or the
-- DIRECT_LOAD or DIRECT_ALLOC feature
local HEADER = {
    {"version", "Version", 1, "be", "always"},
    {"opcode", "Opcode", 1, "be", "always"},
    {"flags", "Flags", 2, "be", "always"},
    {"request_id", "Request ID", 8, "be", "always"},
    {"handle", "Block Handle", 8, "addr", "always"},
    {"generation", "Generation", 2, "be", "always"},
    {"status", "Status", 2, "be", "always"},
}

local BODIES = {
    [0x01] = {  -- HELLO
        {"requested_features", "Requested Features", 2, "be", "always"},
        {"completion_credits", "Completion Credits", 2, "be", "always"},
        {"initiator_id", "Initiator ID", 16, "be", "always"},
    },
    [0x02] = {  -- HELLO_ACK
        {"features", "Features", 2, "be", "always"},
        {"request_credits", "Request Credits", 2, "be", "always"},
        {"block_size", "Block Size", 4, "be", "always"},
        {"max_inline", "Max Inline", 4, "be", "always"},
        {"allocation_quota", "Allocation Quota", 4, "be", "always"},
        {"handle_base", "Handle Base", 8, "be", "always"},
        {"handle_count", "Handle Count", 4, "be", "always"},
        {"ticket_timeout_ms", "Ticket Timeout", 4, "be", "always"},
        {"table.stag", "Table STag", 4, "be", "direct_load"},
        {"table.tagged_offset", "Table Tagged Offset", 8, "be", "direct_load"},
        {"table.count", "Table Count", 4, "be", "direct_load"},
        {"table_base_handle", "Table Base Handle", 8, "be", "direct_load"},
        {"table_reserved", "Reserved", 8, "be", "direct_load"},
        {"pool.stag", "Pool STag", 4, "be", "direct_load"},
        {"pool.tagged_offset", "Pool Tagged Offset", 8, "be", "direct_load"},
        {"pool.count", "Pool Count", 4, "be", "direct_load"},
        {"partition.stag", "Partition STag", 4, "be", "direct_alloc"},
        {"partition.tagged_offset", "Partition Tagged Offset", 8, "be", "direct_alloc"},
        {"partition.count", "Partition Count", 4, "be", "direct_alloc"},
        {"ring.stag", "Ring STag", 4, "be", "direct_alloc"},
        {"ring.tagged_offset", "Ring Tagged Offset", 8, "be", "direct_alloc"},
        {"ring.count", "Ring Count", 4, "be", "direct_alloc"},
        {"head.stag", "Head STag", 4, "be", "direct_alloc"},
        {"head.tagged_offset", "Head Tagged Offset", 8, "be", "direct_alloc"},
        {"head.count", "Head Count", 4, "be", "direct_alloc"},
    },
    [0x10] = {  -- LOAD
        {"data_descriptor.stag", "Data Descriptor STag", 4, "addr", "always"},
        {"data_descriptor.tagged_offset", "Data Descriptor Tagged Offset", 8, "addr", "always"},
        {"data_descriptor.length", "Data Descriptor Length", 4, "addr", "always"},
        {"completion_descriptor.stag", "Completion Descriptor STag", 4, "addr", "record"},
        {"completion_descriptor.tagged_offset", "Completion Descriptor Tagged Offset", 8, "addr", "record"},
        {"completion_descriptor.reserved", "Completion Descriptor Reserved", 4, "be", "record"},
    },
    [0x11] = {  -- STORE
        {"data_descriptor.stag", "Data Descriptor STag", 4, "addr", "always"},
        {"data_descriptor.tagged_offset", "Data Descriptor Tagged Offset", 8, "addr", "always"},
        {"data_descriptor.length", "Data Descriptor Length", 4, "addr", "always"},
        {"completion_descriptor.stag", "Completion Descriptor STag", 4, "addr", "record"},
        {"completion_descriptor.tagged_offset", "Completion Descriptor Tagged Offset", 8, "addr", "record"},
        {"completion_descriptor.reserved", "Completion Descriptor Reserved", 4, "be", "record"},
        {"inline_data", "Inline Data", 0, "be", "inline"},
    },
    [0x12] = {  -- ALLOC_STORE
        {"data_descriptor.stag", "Data Descriptor STag", 4, "addr", "always"},
        {"data_descriptor.tagged_offset", "Data Descriptor Tagged Offset", 8, "addr", "always"},
        {"data_descriptor.length", "Data Descriptor Length", 4, "addr", "always"},
        {"completion_descriptor.stag", "Completion Descriptor STag", 4, "addr", "record"},
        {"completion_descriptor.tagged_offset", "Completion Descriptor Tagged Offset", 8, "addr", "record"},
        {"completion_descriptor.reserved", "Completion Descriptor Reserved", 4, "be", "record"},
        {"inline_data", "Inline Data", 0, "be", "inline"},
    },
    [0x13] = {  -- FREE
        {"completion_descriptor.stag", "Completion Descriptor STag", 4, "addr", "record"},
        {"completion_descriptor.tagged_offset", "Completion Descriptor Tagged Offset", 8, "addr", "record"},
        {"completion_descriptor.reserved", "Completion Descriptor Reserved", 4, "be", "record"},
    },
    [0x14] = {  -- BIND
        {"ticket", "Ticket", 4, "be", "always"},
        {"data_length", "Data Length", 4, "be", "always"},
        {"block_offset", "Block Offset", 8, "addr", "always"},
    },
    [0x20] = {  -- COMPLETION
        {"data_length", "Data Length", 4, "be", "always"},
        {"reserved", "Reserved", 4, "be", "always"},
        {"block_offset", "Block Offset", 8, "addr", "always"},
    },
    [0x30] = {  -- GOODBYE
    },
}

local OPCODES = {
    [0x01] = "HELLO",
    [0x02] = "HELLO_ACK",
    [0x10] = "LOAD",
    [0x11] = "STORE",
    [0x12] = "ALLOC_STORE",
    [0x13] = "FREE",
    [0x14] = "BIND",
    [0x20] = "COMPLETION",
    [0x30] = "GOODBYE",
}

local STATUS = {
    [0] = "OK",
    [1] = "INVALID_HANDLE",
    [2] = "STALE_GENERATION",
    [3] = "NOT_VALID",
    [4] = "ALREADY_BOUND",
    [5] = "NO_SPACE",
    [6] = "SEALED",
    [7] = "NOT_SEALED",
    [8] = "TOO_LARGE",
    [9] = "MALFORMED",
    [10] = "INTERNAL",
    [11] = "TICKET_ABANDONED",
}

local REQUEST_FLAGS = {
    {0x0001, "INLINE"},
    {0x0002, "SEAL"},
    {0x0004, "RECORD"},
    {0x0008, "INVALIDATE"},
    {0x0010, "ALLOW_UNSEALED"},
}

local GOODBYE_FLAGS = {
    {0x0001, "RELEASE"},
}

local FEATURES = {
    {0x0001, "DIRECT_LOAD"},
    {0x0002, "DIRECT_ALLOC"},
    {0x0004, "RECORD_COMPLETION"},
    {0x0008, "ADDR_LE"},
}
-- END FIELD TABLE

local NEGOTIATION = {[0x01] = true, [0x02] = true}  -- always big-endian
local REQUESTS = {[0x10] = true, [0x11] = true, [0x12] = true, [0x13] = true}
local FLAG_RECORD, FLAG_INLINE = 0x0004, 0x0001
local FEATURE_DIRECT_LOAD, FEATURE_DIRECT_ALLOC = 0x0001, 0x0002
-- RC SEND First and Only (plain, with Immediate, with Invalidate): a message starts here
local SEND_STARTS = {[0x00] = true, [0x04] = true, [0x05] = true, [0x17] = true}

kbtp.prefs.addr_le = Pref.bool("ADDR_LE", false,
    "Decode the Block Handle, the Data and Completion Descriptors and the Block Offset "
    .. "of BIND and COMPLETION as little-endian (a session whose HELLO_ACK set ADDR_LE)")

-- one ProtoField per key; sizes, counts and credits in decimal, the rest in hex
local DECIMAL = {
    version = true, request_id = true, generation = true, completion_credits = true,
    request_credits = true, block_size = true, max_inline = true, allocation_quota = true,
    handle_count = true, ticket_timeout_ms = true, ticket = true, data_length = true,
    ["data_descriptor.length"] = true, ["table.count"] = true, ["pool.count"] = true,
    ["partition.count"] = true, ["ring.count"] = true, ["head.count"] = true,
}
local fields = {}
local function field_for(key, name, size)
    if fields[key] then return fields[key] end
    local abbrev = "kbtp." .. key
    local f
    if key == "opcode" then
        f = ProtoField.uint8(abbrev, name, base.HEX, OPCODES)
    elseif key == "status" then
        f = ProtoField.uint16(abbrev, name, base.DEC, STATUS)
    elseif size == 0 or size == 16 then
        f = ProtoField.bytes(abbrev, name)
    else
        local shown = DECIMAL[key] and base.DEC or base.HEX
        local make = ({[1] = ProtoField.uint8, [2] = ProtoField.uint16,
                       [4] = ProtoField.uint32, [8] = ProtoField.uint64})[size]
        f = make(abbrev, name, shown)
    end
    fields[key] = f
    return f
end

for _, spec in ipairs(HEADER) do field_for(spec[1], spec[2], spec[3]) end
for _, body in pairs(BODIES) do
    for _, spec in ipairs(body) do field_for(spec[1], spec[2], spec[3]) end
end

local flag_fields = {}
local function bit_fields(prefix, bits)
    local out = {}
    for _, bit in ipairs(bits) do
        local f = ProtoField.bool(prefix .. "." .. bit[2]:lower(), bit[2], 16, nil, bit[1])
        flag_fields[#flag_fields + 1] = f
        out[#out + 1] = f
    end
    return out
end
local request_flag_fields = bit_fields("kbtp.flags", REQUEST_FLAGS)
local goodbye_flag_fields = bit_fields("kbtp.flags", GOODBYE_FLAGS)
local feature_fields = bit_fields("kbtp.features", FEATURES)

local all = {}
for _, f in pairs(fields) do all[#all + 1] = f end
for _, f in ipairs(flag_fields) do all[#all + 1] = f end
kbtp.fields = all

local ef_continued = ProtoExpert.new("kbtp.continued", "Message continues in the next SEND packets",
    expert.group.REASSEMBLE, expert.severity.NOTE)
kbtp.experts = {ef_continued}

local bth_opcode = Field.new("infiniband.bth.opcode")

local band = bit32 and bit32.band or bit.band

local function flag_names(value, bits)
    local names = {}
    for _, bit in ipairs(bits) do
        if band(value, bit[1]) ~= 0 then names[#names + 1] = bit[2] end
    end
    return table.concat(names, "|")
end

local function present(presence, flags, features)
    if presence == "always" then return true end
    if presence == "record" then return band(flags, FLAG_RECORD) ~= 0 end
    if presence == "inline" then return band(flags, FLAG_INLINE) ~= 0 end
    if presence == "direct_load" then return band(features, FEATURE_DIRECT_LOAD) ~= 0 end
    if presence == "direct_alloc" then return band(features, FEATURE_DIRECT_ALLOC) ~= 0 end
    return false
end

-- add one field; returns the offset after it, or nil when the packet ends first
local function add_field(tree, tvb, offset, spec, little)
    local key, size, order = spec[1], spec[3], spec[4]
    local len = tvb:len()
    if size == 0 then size = len - offset end
    if offset + size > len then return nil end
    local range = tvb(offset, size)
    if order == "addr" and little then
        return offset + size, tree:add_le(fields[key], range)
    end
    return offset + size, tree:add(fields[key], range)
end

local function dissect(tvb, pinfo, tree)
    local opcode = tvb(1, 1):uint()
    local little = kbtp.prefs.addr_le and not NEGOTIATION[opcode]
    local flags = tvb(2, 2):uint()
    local subtree = tree:add(kbtp, tvb(), "KBTP " .. OPCODES[opcode])
    local offset = 0
    local item
    for _, spec in ipairs(HEADER) do
        offset, item = add_field(subtree, tvb, offset, spec, little)
        if spec[1] == "flags" then
            local bits = REQUESTS[opcode] and request_flag_fields
                or (opcode == 0x30 and goodbye_flag_fields) or {}
            for _, f in ipairs(bits) do item:add(f, tvb(2, 2)) end
        end
    end
    local features = 0
    local complete = true
    for _, spec in ipairs(BODIES[opcode]) do
        if present(spec[5], flags, features) then
            local next_offset
            next_offset, item = add_field(subtree, tvb, offset, spec, little)
            if not next_offset then complete = false break end
            if spec[1] == "features" or spec[1] == "requested_features" then
                features = tvb(offset, 2):uint()
                for _, f in ipairs(feature_fields) do item:add(f, tvb(offset, 2)) end
            end
            offset = next_offset
        end
    end
    local info = OPCODES[opcode]
    local names = REQUESTS[opcode] and flag_names(flags, REQUEST_FLAGS) or ""
    if names ~= "" then info = info .. " [" .. names .. "]" end
    info = info .. " id=" .. tostring(tvb(4, 8):uint64())
    local status = tvb(22, 2):uint()
    if opcode == 0x20 or opcode == 0x02 then
        info = info .. " " .. (STATUS[status] or tostring(status))
    end
    if not complete then subtree:add_proto_expert_info(ef_continued) end
    pinfo.cols.protocol = "KBTP"
    pinfo.cols.info = info
    return tvb:len()
end

local function heuristic(tvb, pinfo, tree)
    if tvb:len() < 24 then return false end
    local ops = {bth_opcode()}
    local op = ops[#ops]
    if op == nil or not SEND_STARTS[op.value] then return false end
    if tvb(0, 1):uint() ~= 1 or not OPCODES[tvb(1, 1):uint()] then return false end
    dissect(tvb, pinfo, tree)
    return true
end

kbtp:register_heuristic("infiniband.payload", heuristic)
