# Writes OUT, a C file defining one file's bytes compiled into meter:
#   const char NAME[];        the bytes of IN, NUL-terminated
#   const size_t NAME_len;    their number, without the NUL
# Used for api/openapi.json (served at GET /v1/openapi.json).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
get_filename_component(base ${IN} NAME)
set(body "/* Generated from ${base} by scripts/embed_file.cmake. Do not edit. */\n")
string(APPEND body "#include <stddef.h>\n\n")
string(APPEND body "extern const char ${NAME}[];\nextern const size_t ${NAME}_len;\n")
string(APPEND body "const char ${NAME}[] = {${hex}0x00};\n")
string(APPEND body "const size_t ${NAME}_len = ${len};\n")
file(WRITE ${OUT}.tmp "${body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
