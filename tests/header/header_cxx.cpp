// Compiles sluice.h alone as C++ (-pedantic -Werror).
#include "sluice.h"
int sluice_header_cxx_check();
int sluice_header_cxx_check() { return SL_VERSION_NUMBER > 0; }
