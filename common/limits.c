/*
 * common/limits.c - the table of limits and defaults (common/limits.h).
 */
#include "limits.h"

const vd_limit_info vd_limits[VD_LIMI__COUNT] = {
#define VD_LIM_ROW(ID, value, option, reason) [VD_LIMI_##ID] = {#ID, (value), option, reason},
    VD_LIMITS(VD_LIM_ROW)
#undef VD_LIM_ROW
};
_Static_assert(sizeof(vd_limits) / sizeof(vd_limits[0]) == VD_LIMI__COUNT, "one row per limit");
