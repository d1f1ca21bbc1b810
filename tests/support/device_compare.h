// Moved to the installed library: framework/testing/device_compare.h (minidp::testing, target minidp::testing).
#pragma once

#include "framework/testing/device_compare.h"
