/*
 * tests/comm/test_comm_nccl_abi.c - backend/comm/comm_nccl_abi.h against
 * the real nccl.h, where the build machine has one.
 *
 * Why: the nccl comm declares NCCL's types and constants itself, so that it
 * compiles without CUDA headers; a wrong value there would pass every CPU
 * test and fail only on a GPU.  Compiling this file is the check
 * (_Static_assert); running it prints the header's version.  The entry
 * points' signatures are not compared here: ours take the stream as void *
 * where NCCL's take cudaStream_t (a pointer either way), so the types
 * differ by design.
 */
#include <nccl.h>

#include "backend/comm/comm_nccl_abi.h"
#include "test.h"

_Static_assert((int)TSR_NCCL_SUCCESS == (int)ncclSuccess, "ncclSuccess");
_Static_assert((int)TSR_NCCL_UNHANDLED_CUDA_ERROR == (int)ncclUnhandledCudaError,
               "ncclUnhandledCudaError");
_Static_assert((int)TSR_NCCL_SYSTEM_ERROR == (int)ncclSystemError, "ncclSystemError");
_Static_assert((int)TSR_NCCL_INTERNAL_ERROR == (int)ncclInternalError, "ncclInternalError");
_Static_assert((int)TSR_NCCL_INVALID_ARGUMENT == (int)ncclInvalidArgument, "ncclInvalidArgument");
_Static_assert((int)TSR_NCCL_INVALID_USAGE == (int)ncclInvalidUsage, "ncclInvalidUsage");
_Static_assert((int)TSR_NCCL_REMOTE_ERROR == (int)ncclRemoteError, "ncclRemoteError");
_Static_assert((int)TSR_NCCL_IN_PROGRESS == (int)ncclInProgress, "ncclInProgress");
_Static_assert((int)TSR_NCCL_UINT8 == (int)ncclUint8, "ncclUint8");
_Static_assert((int)TSR_NCCL_FLOAT16 == (int)ncclFloat16, "ncclFloat16");
_Static_assert((int)TSR_NCCL_FLOAT32 == (int)ncclFloat32, "ncclFloat32");
_Static_assert((int)TSR_NCCL_BFLOAT16 == (int)ncclBfloat16, "ncclBfloat16");
_Static_assert((int)TSR_NCCL_SUM == (int)ncclSum, "ncclSum");
_Static_assert(TSR_NCCL_UNIQUE_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "NCCL_UNIQUE_ID_BYTES");
_Static_assert(sizeof(tsr_nccl_unique_id) == sizeof(ncclUniqueId), "ncclUniqueId");
_Static_assert(sizeof(tsr_nccl_result) == sizeof(ncclResult_t), "ncclResult_t size");
_Static_assert(sizeof(tsr_nccl_data_type) == sizeof(ncclDataType_t), "ncclDataType_t size");
_Static_assert(sizeof(tsr_nccl_red_op) == sizeof(ncclRedOp_t), "ncclRedOp_t size");
_Static_assert(sizeof(tsr_nccl_comm) == sizeof(ncclComm_t), "ncclComm_t size");

static int test_abi(void)
{
    printf("nccl.h %d.%d.%d (NCCL_VERSION_CODE %d): our declarations match\n", NCCL_MAJOR,
           NCCL_MINOR, NCCL_PATCH, NCCL_VERSION_CODE);
    return 0;
}

static const tsr_test_entry tests[] = {{"abi", test_abi}};

TSR_TEST_TABLE_MAIN(tests)
