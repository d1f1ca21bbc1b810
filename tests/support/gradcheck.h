// Moved to the installed library: framework/testing/gradcheck.h (minidp::testing, target minidp::testing).
#pragma once

#include "framework/testing/gradcheck.h"
