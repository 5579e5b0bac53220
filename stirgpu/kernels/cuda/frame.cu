// The image's zero-framed copies that the forward kernels read (joseph.cu, "framed walks"):
// A (nz+2, ny+2, nx+2), element (z, y, x) at [z+1][y+1][x+1], and B (nz+2, nx+2, ny+2), at
// [z+1][x+1][y+1]: a one-voxel frame of zeros makes bounds checks unnecessary, and walks along x
// read B, where neighbouring LORs (spread along y) read contiguous voxels.
#define FRAME_TILE 32
#define FRAME_ROWS 8

// A[z+1][y+1][x+1] = B[z+1][x+1][y+1] = img[z][y][x], zero frame.  One read of the image, both
// copies written with coalesced rows (B through a shared-memory transpose).
// grid = (tiles over nx+2, tiles over ny+2, nz+2), block = (FRAME_TILE, FRAME_ROWS).
extern "C" __global__ void framed_copies(const float *__restrict__ img, float *__restrict__ A, float *__restrict__ B,
                                         int nz, int ny, int nx)
{
    __shared__ float tile[FRAME_TILE][FRAME_TILE + 1];
    const int zp = blockIdx.z; // framed coordinates
    const int x0 = blockIdx.x * FRAME_TILE, y0 = blockIdx.y * FRAME_TILE;
    const int ny2 = ny + 2, nx2 = nx + 2;
    const long long plane_a = (long long)zp * ny2 * nx2, plane_b = (long long)zp * nx2 * ny2;
    const int z = zp - 1;
    for (int r = threadIdx.y; r < FRAME_TILE; r += FRAME_ROWS)
    {
        const int yp = y0 + r, xp = x0 + (int)threadIdx.x;
        const int y = yp - 1, x = xp - 1;
        float val = 0.0f;
        if ((unsigned)z < (unsigned)nz && (unsigned)y < (unsigned)ny && (unsigned)x < (unsigned)nx)
            val = img[((long long)z * ny + y) * nx + x];
        tile[r][threadIdx.x] = val;
        if (yp < ny2 && xp < nx2)
            A[plane_a + (long long)yp * nx2 + xp] = val;
    }
    __syncthreads();
    for (int r = threadIdx.y; r < FRAME_TILE; r += FRAME_ROWS)
    {
        const int xp = x0 + r, yp = y0 + (int)threadIdx.x;
        if (xp < nx2 && yp < ny2)
            B[plane_b + (long long)xp * ny2 + yp] = tile[threadIdx.x][r];
    }
}
