"""The torch modules whose training steps dc is checked against (check_train_torch.py):
small enough for the CPU reference, covering the ops of CNNs and BERT-style encoders."""
import os
import sys

import torch
import torch.nn as nn

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
sys.path.insert(0, SCRIPTS)
import make_examples  # noqa: E402
from export_models import BertEmbeddings, BertLayer  # noqa: E402


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.sigmoid(self.fc1(x)) * torch.tanh(self.fc1(x)))


class TinyUnet(nn.Module):
    """An encoder-decoder: a strided ConvTranspose, bilinear and nearest upsampling (Resize),
    skip connections concatenated, a per-pixel output."""

    def __init__(self):
        super().__init__()
        self.enc1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.enc2 = nn.Conv2d(8, 12, 3, padding=1)
        self.up = nn.ConvTranspose2d(12, 6, 2, stride=2)
        self.up_grouped = nn.ConvTranspose2d(12, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.head = nn.Conv2d(8 + 6 + 4 + 12 + 8, 4, 1)

    def forward(self, x):
        e1 = torch.relu(self.bn1(self.enc1(x)))
        p = torch.max_pool2d(e1, 2)
        e2 = torch.relu(self.enc2(p))
        bilinear = nn.functional.interpolate(e2, scale_factor=2.0, mode="bilinear", align_corners=False)
        nearest = nn.functional.interpolate(p, scale_factor=2.0, mode="nearest")
        u = torch.cat([e1, self.up(e2), self.up_grouped(e2), bilinear, nearest], 1)
        return self.head(torch.tanh(u))


class SmallCnn(nn.Module):
    """Conv-BN-ReLU, max pool, a strided conv with bias, average pool, global pool, fc."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.pool = nn.AvgPool2d(2, count_include_pad=False)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc(torch.flatten(torch.mean(x, dim=(2, 3), keepdim=True), 1))


class NormsCnn(nn.Module):
    """GroupNorm and InstanceNorm (affine): torch exports each as InstanceNormalization
    (GroupNorm's over a reshape of its groups, then its per-channel affine), which dc lowers to
    LayerNormalization and the affine ops (lower_norms)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.gn = nn.GroupNorm(4, 8)
        self.conv2 = nn.Conv2d(8, 6, 3, stride=2, padding=1)
        self.inorm = nn.InstanceNorm2d(6, affine=True)
        self.fc = nn.Linear(6, 10)

    def forward(self, x):
        x = torch.relu(self.gn(self.conv1(x)))
        x = torch.relu(self.inorm(self.conv2(x)))
        return self.fc(torch.flatten(torch.mean(x, dim=(2, 3), keepdim=True), 1))


class SinNet(nn.Module):
    """Sin between two layers: dc has no gradient rule for it."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(torch.sin(self.fc1(x)))


class SumNet(nn.Module):
    """A scalar output: no class axis for cross_entropy."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x).sum()


class BertConfig:
    vocab = 50
    hidden = 32
    heads = 4
    intermediate = 64
    seq = 8
    max_positions = 16
    type_vocab = 2
    eps = 1e-5
    layers = 2
    classes = 3


class SmallBert(nn.Module):
    """Embeddings, post-LN encoder layers (BertLayer of export_models.py; 2 unless told), a
    classifier on the first token."""

    def __init__(self, batch, layers=BertConfig.layers):
        super().__init__()
        c = BertConfig()
        self.embeddings = BertEmbeddings(c, batch)
        self.layers = nn.ModuleList([BertLayer(c, batch) for _ in range(layers)])
        self.classifier = nn.Linear(c.hidden, c.classes)

    def forward(self, input_ids, attention_mask):
        mask_add = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x, mask_add)
        return self.classifier(torch.tanh(x[:, 0]))


def resnet18(classes=10):
    import torchvision
    return torchvision.models.resnet18(num_classes=classes)


def mobilenetv2(classes=10):
    """torchvision's MobileNetV2 without its classifier's Dropout (PyTorch's mask and dc's
    Philox mask would differ; dc's Dropout is checked on its own)."""
    import torchvision
    return torchvision.models.mobilenet_v2(num_classes=classes, dropout=0.0)


def _float(shape, gen):
    return torch.randn(shape, generator=gen)


def distinct_norms(model, gen):
    """Random BatchNorm, LayerNorm, GroupNorm and InstanceNorm scale, shift and running
    statistics. With PyTorch's defaults (1, 0, 0, 1) torch.onnx.export deduplicates equal
    initializers: a running variance becomes an Identity of the scale, one LayerNorm's weight
    another's."""
    for m in model.modules():
        if isinstance(m, (nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm2d)):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.normal_(0.0, 0.1, generator=gen)
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.normal_(0.0, 0.1, generator=gen)
                m.running_mean.normal_(0.0, 0.1, generator=gen)
                m.running_var.uniform_(0.5, 1.5, generator=gen)


def case(name):
    """(module, example inputs, input names, loss, labels) of a named test case, seeded."""
    module, args, names, loss, labels = _case(name)
    distinct_norms(module, torch.Generator().manual_seed(13))
    return module, args, names, loss, labels


def _case(name):
    torch.manual_seed(7)
    gen = torch.Generator().manual_seed(11)
    if name == "mlp":
        return Mlp(), (_float((4, 8), gen),), ["x"], "cross_entropy", torch.tensor([0, 3, 1, 3])
    if name == "small_cnn":
        return (SmallCnn(), (_float((4, 3, 16, 16), gen),), ["image"], "cross_entropy",
                torch.tensor([1, 7, 3, 9]))
    if name == "norms_cnn":
        return NormsCnn(), (_float((4, 3, 12, 12), gen),), ["image"], "cross_entropy", torch.tensor([2, 5, 5, 8])
    if name == "tiny_unet":
        return TinyUnet(), (_float((2, 3, 16, 16), gen),), ["image"], "mse", _float((2, 4, 16, 16), gen)
    if name == "tiny_cnn":
        model = make_examples.TinyCnn()
        return model, (_float((2, 3, 32, 32), gen),), ["input"], "cross_entropy", torch.tensor([4, 2])
    if name == "tiny_transformer":
        model = make_examples.TinyTransformer()
        x = _float((1, 16, 64), gen)
        mask = torch.ones(1, 16, dtype=torch.int64)
        mask[:, 12:] = 0
        return model, (x, mask), ["hidden_states", "attention_mask"], "mse", _float((1, 16, 64), gen)
    if name in ("small_bert", "bert4"):  # bert4: the 4-layer encoder
        ids = torch.randint(0, BertConfig.vocab, (4, BertConfig.seq), generator=gen)
        ids[:, 1] = ids[:, 2]  # a repeated token: its embedding row gets a summed gradient
        mask = torch.ones(4, BertConfig.seq, dtype=torch.int64)
        mask[2:, 6:] = 0
        model = SmallBert(4, layers=4 if name == "bert4" else BertConfig.layers)
        return model, (ids, mask), ["input_ids", "attention_mask"], "cross_entropy", torch.tensor([0, 2, 1, 2])
    if name == "mobilenetv2":
        return mobilenetv2(), (_float((4, 3, 64, 64), gen),), ["image"], "cross_entropy", torch.tensor([3, 9, 0, 5])
    if name == "resnet18":
        return resnet18(), (_float((4, 3, 64, 64), gen),), ["image"], "cross_entropy", torch.tensor([0, 9, 4, 4])
    raise ValueError(name)
